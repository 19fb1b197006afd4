"""``pmem ingest STREAM --out STATE``: build one P-Mem state from a stream, resumably, on Ray."""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path

from pmem._exit import EXIT_INTERRUPTED
from pmem._lock import LockHeldError
from pmem.ingest import ingest
from pmem.ingest._checkpoint import ResumeError, checkpointed_events
from pmem.ingest._report import nothing_ingested
from pmem.ingest._stream import StreamError
from pmem.ingest._workdir import Workdir, workdir_of
from pmem.models import ModelCallError, one_line
from pmem.runner import ConfigError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Build one P-Mem state from STREAM (JSONL, Parquet or Arrow; one event per row: `text` required, "
        "`source`, `time`, `valid_time`, `id` optional) through P-Mem's write path, on an embedded Ray or "
        "a cluster. A row with `key` is an already-extracted fact, written without any model: `key`, "
        "`value`, `op` (accept, contest, reject, revoke, resolve, noop; default accept), and `text` as "
        "its evidence (default: `key: value`). Re-running the same command after an interruption resumes "
        "from the last checkpoint (kept in STATE.ingest/); any --partitions gives the same bytes."
    )
    p.add_argument("stream", type=Path, help="the stream file (.jsonl, .parquet, .arrow)")
    p.add_argument(
        "--out", type=Path, required=True, help="the state file to write (Arrow; any name, no suffix needed)"
    )
    p.add_argument(
        "--config", type=Path, help="TOML with [models.agent], [models.embedder], optional [ingest]"
    )
    p.add_argument("--partitions", type=int, default=1, help="key partitions = Ray workers (default 1)")
    p.add_argument("--address", help="a Ray cluster to join (default: an embedded local Ray)")
    p.add_argument(
        "--shards",
        action="store_true",
        help="write a sharded state: --out is a directory of parts (--parts), each written by the worker "
        "that commits its keys (the driver never holds the graph); ProvenanceGraph.load(OUT) opens the whole",
    )
    p.add_argument(
        "--parts",
        type=int,
        help="with --shards: the state's parts, a multiple of --partitions (default: --partitions); each "
        "worker builds its parts one at a time at the end, so its peak memory is about its largest part's "
        "graph (docs/performance.md)",
    )
    p.add_argument("--skip-bad", action="store_true", help="skip bad rows, listed in STATE.ingest/rejects/")
    p.add_argument("--no-progress", action="store_true", help="no progress bar or progress lines")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument(
        "--allow-empty",
        action="store_true",
        help="exit 0 even when no fact was extracted (default: exit 1 and say why)",
    )


def run(args: argparse.Namespace) -> int:
    try:
        report = ingest(
            args.stream,
            args.out,
            config=args.config,
            partitions=args.partitions,
            address=args.address,
            skip_bad=args.skip_bad,
            progress=not args.no_progress,
            shards=args.shards,
            parts=args.parts,
        )
    except (StreamError, ResumeError, ConfigError, FileNotFoundError, ValueError, LockHeldError) as exc:
        print(f"pmem ingest: error: {one_line(exc)}", file=sys.stderr)
        return 2
    except OSError as exc:  # the disk: read-only, full, gone; the last checkpoint is kept
        print(f"pmem ingest: error: {one_line(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the exit short
        print(f"pmem ingest: {_interrupted(args.out)}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except ModelCallError as exc:
        print(
            f"pmem ingest: error: {exc}; the last checkpoint is kept: run the same command to resume",
            file=sys.stderr,
        )
        return 1
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        for line in report.lines():
            print(line)
    empty = nothing_ingested(report, report.spec.get("agent", {}).get("backend", ""))
    if empty is not None:
        print(f"pmem ingest: {empty}; the state is written; --allow-empty accepts it", file=sys.stderr)
        return 0 if args.allow_empty else 1
    return 0


def _interrupted(out: Path) -> str:
    """What a Ctrl-C kept: the last checkpoint's events, and how to resume."""

    work = Workdir(workdir_of(out))
    try:
        events = checkpointed_events(work)
    except ResumeError:
        events = None
    if events is None:
        return (
            "interrupted before the first checkpoint; nothing was kept (run the same command to start again)"
        )
    return f"interrupted: {events:,} events are checkpointed in {work.root}; run the same command again to resume"
