"""`pmem erase STATE EVIDENCE_ID --out NEW_STATE`: erase one evidence item from a saved graph, and from
every copy the project keeps of it.

Writes the erased graph to ``--out`` (atomically; never over STATE itself, which still holds the text:
replace STATE with it when you have checked it) and scrubs what P-Mem wrote beside STATE: an ingest's
working folder ``STATE.ingest/`` (:mod:`pmem.ingest._erase`), the journal of a memory's writes
(``STATE.journal``), which is folded into STATE so that no second copy of the text lies beside it, and
STATE's search index (``pmem index``: its keys and hashed values), which is removed. Prints the receipt as JSON: the evidence,
the keys whose value changed (before, after), the versions erased, and ``cleaned``, every place cleaned.
Errors go to stderr with exit status 2: an unreadable state file, an unknown evidence id, an ``--out``
that is STATE or whose directory does not exist, a working folder an ingest is writing now, and a
sharded state (``pmem ingest --shards``), refused before anything is written with every file that holds
the statement named: its write-log segments cannot record an erasure.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from pmem._lock import LockHeldError
from pmem._scrub import stated_only_by
from pmem.graph import (
    ProvenanceGraph,
    StateChangedError,
    StateFileError,
    is_sharded,
    journal_path,
    search_index_dir,
)
from pmem.ingest import erase_in_workdir, sharded_copies
from pmem.rundir import RUN_TOML
from pmem.runner import RunErasureError, erase_in_run

if TYPE_CHECKING:
    import argparse


#: The two forms: ``--out`` is required for a state, ``--history`` for a run directory (which form a
#: call is depends on what STATE is on disk, so argparse cannot require either: the usage says it).
USAGE = (
    "pmem erase STATE EVIDENCE_ID --out NEW_STATE\n"
    "       pmem erase RUN_DIR EVIDENCE_ID --history HISTORY_ID [--arm ARM]"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.usage = USAGE
    parser.description = (
        "Erase one evidence item: from a state file (into --out NEW_STATE, with the copies an ingest keeps "
        "beside it scrubbed), or from a sweep's run directory (in place, with --history: the history's "
        "state in every arm, its rows, the response cache, the report)."
    )
    parser.add_argument("state", help="a state file written by ProvenanceGraph.save, or a run directory")
    parser.add_argument("evidence", metavar="EVIDENCE_ID", help="the evidence to erase (e.g. e12)")
    parser.add_argument(
        "--out",
        type=Path,
        metavar="NEW_STATE",
        help="required for a state: where the erased graph is written (a new state file)",
    )
    parser.add_argument(
        "--history",
        metavar="HISTORY_ID",
        help="required for a run directory: the history whose evidence it is",
    )
    parser.add_argument(
        "--arm", help="a run directory: the arm whose state names the evidence (default pmem)"
    )


def run(args: argparse.Namespace) -> int:

    if Path(args.state).is_dir() and not is_sharded(args.state):  # a sharded state is erased as a file is
        return _run_directory(args)
    if args.out is None:
        print("error: --out NEW_STATE is required to erase from a state file", file=sys.stderr)
        return 2
    return _state_file(args)


def _run_directory(args: argparse.Namespace) -> int:

    if not args.history:
        print(
            f"error: {args.state} is a directory: give --history HISTORY_ID to erase from a run",
            file=sys.stderr,
        )
        return 2
    if not (Path(args.state) / RUN_TOML).is_file():
        print(f"error: {args.state} is a directory but not a run directory (no {RUN_TOML})", file=sys.stderr)
        return 2
    try:
        receipt = erase_in_run(args.state, args.history, args.evidence, args.arm)
    except (RunErasureError, LockHeldError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(dataclasses.asdict(receipt), indent=1))
    return 0


def _state_file(args: argparse.Namespace) -> int:

    state, out = Path(args.state), args.out
    if out.resolve() == state.resolve():
        print(f"error: --out {out} is the input state: write the erased graph elsewhere", file=sys.stderr)
        return 2
    if out.is_dir():
        print(f"error: --out {out} is a directory: give the new state file's path", file=sys.stderr)
        return 2

    try:
        graph = ProvenanceGraph.load(state)
        before = ProvenanceGraph.load(state)  # the graph as it was, for the values only it stated
        receipt = graph.erase(args.evidence)
        needles = [before.evidence(args.evidence).text, *stated_only_by(before, graph, receipt)]
        if is_sharded(state):
            return _refuse_sharded(state, args.evidence, needles)
        graph.save(out)
    except (StateFileError, ValueError, FileNotFoundError, NotADirectoryError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # writing --out: a read-only folder, a full disk (the input is untouched)
        print(f"error: --out {out}: {exc.strerror or exc}; {state} is unchanged", file=sys.stderr)
        return 2
    try:
        cleaned = [f"{out} (the erased graph)", *erase_in_workdir(state, args.evidence, needles)]
        journal = journal_path(state)
        if journal.exists():  # a second copy of the text beside STATE: folded into STATE, then gone
            before.save(state)
            cleaned.append(f"{journal} (folded into {state}, which holds the text until you replace it)")
        index = search_index_dir(state)
        if index.is_dir():  # each cell's key and hashed `key: value`: a derived copy, rebuilt in seconds
            shutil.rmtree(index)
            cleaned.append(f"{index} (the search index: removed; `pmem index` the erased state)")
    except (LockHeldError, StateFileError, StateChangedError, OSError) as exc:
        print(
            f"error: {out} is written, but the copies beside {state} are not scrubbed: {exc}", file=sys.stderr
        )
        return 2
    print(json.dumps({**dataclasses.asdict(receipt), "out": str(out), "cleaned": cleaned}, indent=1))
    return 0


def _refuse_sharded(state: Path, evidence: str, needles: list[str]) -> int:
    """Refuse to erase from a sharded state, before anything is written, naming every file that holds
    the statement: its parts keep their evidence in write-log segments (the union is their replay), and
    a write log cannot record an erasure, so no erased state could be sharded, and the segments in the
    state and in its ingest folder (hard links of the same files) cannot be scrubbed."""

    files = ", ".join(str(p) for p in sharded_copies(state, needles)) or "none found byte for byte"
    convert = f"pmem.ProvenanceGraph.load({str(state)!r}).save({str(state) + '.arrow'!r})"
    print(
        f"error: {state} is a sharded state (pmem ingest --shards), whose write-log segments cannot record "
        f"an erasure: nothing was written. The files holding {evidence}'s text or a value only it stated: "
        f"{files}. To erase it, save the union as a state file ({convert}), erase {evidence} from that "
        f"file, and remove {state} and the ingest folder beside it",
        file=sys.stderr,
    )
    return 2
