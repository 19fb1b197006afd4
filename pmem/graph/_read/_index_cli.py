"""`pmem index STATE [--dim N]`: build the search index of a saved state (file, directory or sharded), part
by part, without loading it (:func:`pmem.graph._read._search.build_search_index`); ``pmem inspect STATE --search
QUERY`` and ``StateReader.search`` read it. Errors go to stderr with exit status 2: an unreadable state,
a bad ``--dim``, or a state with no current value to index.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING

from pmem.graph._persist._sealing import StateFileError
from pmem.graph._read._reader import StateReader
from pmem.graph._read._search import DEFAULT_DIM, MAX_DIM, build_search_index

if TYPE_CHECKING:
    import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("state", help="a saved state: a file, a directory state or a sharded state")
    parser.add_argument(
        "--dim",
        type=int,
        default=DEFAULT_DIM,
        help=f"columns the n-grams are hashed into, 1 to {MAX_DIM} (default {DEFAULT_DIM}, the hashing embedder's)",
    )


def run(args: argparse.Namespace) -> int:
    if not 0 < args.dim <= MAX_DIM:
        print(f"error: --dim {args.dim}: give 1 to {MAX_DIM} columns", file=sys.stderr)
        return 2
    started = time.perf_counter()
    try:
        stats = build_search_index(StateReader(args.state), dim=args.dim)
    except StateFileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    seconds = time.perf_counter() - started
    if not stats.cells:
        print(
            f"error: {args.state}: no cell holds a current value: the index {stats.folder} is empty",
            file=sys.stderr,
        )
        return 2
    print(
        f"{args.state}: indexed {stats.cells:,} cells in {stats.parts} part(s), "
        f"{stats.bytes / 2**20:,.1f} MiB, in {seconds:.1f} s -> {stats.folder}"
    )
    return 0
