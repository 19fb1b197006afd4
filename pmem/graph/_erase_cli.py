"""`pmem erase STATE EVIDENCE_ID --out NEW_STATE`: erase one evidence item from a saved graph.

Writes the erased graph to ``--out`` (atomically; never over STATE itself, which still holds the text)
and prints the receipt as JSON: the evidence, the keys whose value changed (before, after), the versions
erased. Errors go to stderr with exit status 2: an unreadable state file, an unknown evidence id, an
``--out`` that is STATE or whose directory does not exist.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("state", help="a state file written by ProvenanceGraph.save")
    parser.add_argument("evidence", metavar="EVIDENCE_ID", help="the evidence to erase (e.g. e12)")
    parser.add_argument("--out", required=True, type=Path, help="where the erased graph is written")


def run(args: argparse.Namespace) -> int:
    from pmem.graph._graph import ProvenanceGraph
    from pmem.graph._state import StateFileError

    state, out = Path(args.state), args.out
    if out.resolve() == state.resolve():
        print(f"error: --out {out} is the input state: write the erased graph elsewhere", file=sys.stderr)
        return 2
    if out.is_dir():
        print(f"error: --out {out} is a directory: give the new state file's path", file=sys.stderr)
        return 2
    try:
        graph = ProvenanceGraph.load(state)
        receipt = graph.erase(args.evidence)
        graph.save(out)
    except (StateFileError, ValueError, FileNotFoundError, NotADirectoryError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # writing --out: a read-only folder, a full disk (the input is untouched)
        print(f"error: --out {out}: {exc.strerror or exc}; {state} is unchanged", file=sys.stderr)
        return 2
    print(json.dumps({**dataclasses.asdict(receipt), "out": str(out)}, indent=1))
    return 0
