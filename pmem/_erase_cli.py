"""`pmem erase STATE EVIDENCE_ID --out NEW_STATE`: erase one evidence item from a saved graph, and from
every copy the project keeps of it.

Writes the erased graph to ``--out`` (atomically; never over STATE itself, which still holds the text:
replace STATE with it when you have checked it) and scrubs what P-Mem wrote beside STATE: an ingest's
working folder ``STATE.ingest/`` (:mod:`pmem.ingest._erase`). Prints the receipt as JSON: the evidence,
the keys whose value changed (before, after), the versions erased, and ``cleaned``, every place cleaned.
Errors go to stderr with exit status 2: an unreadable state file, an unknown evidence id, an ``--out``
that is STATE or whose directory does not exist, a working folder an ingest is writing now.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import argparse

    from pmem.graph import ErasureReceipt, ProvenanceGraph


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("state", help="a state file written by ProvenanceGraph.save")
    parser.add_argument("evidence", metavar="EVIDENCE_ID", help="the evidence to erase (e.g. e12)")
    parser.add_argument("--out", required=True, type=Path, help="where the erased graph is written")


def run(args: argparse.Namespace) -> int:
    from pmem.graph import ProvenanceGraph, StateFileError

    state, out = Path(args.state), args.out
    if out.resolve() == state.resolve():
        print(f"error: --out {out} is the input state: write the erased graph elsewhere", file=sys.stderr)
        return 2
    if out.is_dir():
        print(f"error: --out {out} is a directory: give the new state file's path", file=sys.stderr)
        return 2
    from pmem._lock import LockHeldError
    from pmem.ingest._erase import erase_in_workdir

    try:
        graph = ProvenanceGraph.load(state)
        before = ProvenanceGraph.load(state)  # the graph as it was, for the values only it stated
        receipt = graph.erase(args.evidence)
        needles = [before.evidence(args.evidence).text, *stated_only_by(before, graph, receipt)]
        graph.save(out)
    except (StateFileError, ValueError, FileNotFoundError, NotADirectoryError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # writing --out: a read-only folder, a full disk (the input is untouched)
        print(f"error: --out {out}: {exc.strerror or exc}; {state} is unchanged", file=sys.stderr)
        return 2
    try:
        cleaned = [f"{out} (the erased graph)", *erase_in_workdir(state, args.evidence, needles)]
    except (LockHeldError, StateFileError, OSError) as exc:
        print(
            f"error: {out} is written, but the copies beside {state} are not scrubbed: {exc}", file=sys.stderr
        )
        return 2
    print(json.dumps({**dataclasses.asdict(receipt), "out": str(out), "cleaned": cleaned}, indent=1))
    return 0


def stated_only_by(before: ProvenanceGraph, after: ProvenanceGraph, receipt: ErasureReceipt) -> list[str]:
    """The values the erased evidence alone stated: those of the versions it erased and the values it
    displaced from the frontier, that no version left in ``after`` holds and no evidence left mentions."""
    erased = set(receipt.erased_versions)
    candidates = {v.value for key in before for v in before.versions(key) if v.id in erased and v.value}
    candidates |= {old for old, _ in receipt.changed.values() if old}
    if not candidates:
        return []
    kept = {v.value for key in after for v in after.versions(key) if v.value is not None}
    texts = [after.evidence(f"e{i}").text for i in range(after.stats()["evidence"])]
    return sorted(c for c in candidates if c not in kept and not any(c in t for t in texts))
