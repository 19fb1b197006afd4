"""`pmem inspect STATE [--key KEY [--ops]] [--as-of SEQ|TIME] [--all] [--search QUERY [--k N]] [--json]`: a
saved graph's cells, one key's history (``--ops``: with its operation log, each operation's evidence), or
the cells nearest a query (``--search``, through the index ``pmem index STATE`` builds); ``--json`` prints
any of these views as one JSON document.

A ``--key`` view reads the state without loading it (:class:`~pmem.graph.StateReader`, each file it
reads checked against its digest first: of a sharded state, the key's part alone), now or, for a sharded
state, ``--as-of`` a seq (its key's rows of its part's log replayed alone): seconds for a state of
millions of operations, whose load takes tens of seconds and gigabytes. Values and evidence are escaped
as in ``render`` (one line each). ``--as-of`` shows the graph as it was: an integer is an arrival seq,
anything else an ISO 8601 observation time (``ProvenanceGraph.as_of``). Errors go to stderr with exit
status 2: an unreadable state file, a bad ``--as-of``, or a ``--key`` the (replayed) graph does not hold.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import TYPE_CHECKING, Any

from pmem.graph._graph import ProvenanceGraph
from pmem.graph._ops._render import escape
from pmem.graph._ops._why import KeyView
from pmem.graph._persist._sealing import StateFileError
from pmem.graph._read._reader import StateReader
from pmem.graph.shards import is_sharded

if TYPE_CHECKING:
    import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("state", help="a state file written by ProvenanceGraph.save")
    parser.add_argument("--key", action="append", help="show this key's history (repeatable)")
    parser.add_argument("--all", action="store_true", help="include empty cells")
    parser.add_argument("--ops", action="store_true", help="with --key: also print the operation log")
    parser.add_argument(
        "--as-of",
        metavar="SEQ|TIME",
        help="show the graph as of an arrival seq (an integer) or an ISO 8601 observation time",
    )
    parser.add_argument(
        "--search",
        metavar="QUERY",
        help="the cells whose current values are nearest QUERY, best first (needs `pmem index STATE` first)",
    )
    parser.add_argument(
        "--k", type=int, default=12, help="with --search: how many cells at most (default 12)"
    )
    parser.add_argument(
        "--json", action="store_true", help="print the same view as one JSON document (every view)"
    )


def _shown(value: str | None) -> str:
    return "(no current value)" if value is None else escape(value)


def describe_key(graph: KeyView, key: str, with_ops: bool = False) -> list[str]:
    cell = graph.cell(key)
    if cell is None:
        return [f"{key}: no such key"]
    lines = [f"{key} = {_shown(cell.value)}  [{cell.status}]"]
    if cell.alternatives:
        lines.append(f"  alternatives: {'; '.join(map(escape, cell.alternatives))}")
    lines.append("  versions (newest first):")
    for v in reversed(graph.versions(key)):
        end = "open" if v.valid_to is None else str(v.valid_to)
        lines.append(
            f"    {v.id:>8}  {v.status:<12} t={v.valid_from}..{end:<6} support={v.support}  {escape(v.value)}"
        )
        links = []
        if v.supersedes:
            links.append(f"supersedes {v.supersedes}")
        if v.alternative_of:
            links.append(f"alternative of {v.alternative_of}")
        if links:
            lines.append(f"              {', '.join(links)}")
        if v.evidence is not None:
            ev = graph.evidence(v.evidence)
            when = f" @ {escape(ev.time)}" if ev.time else ""
            when += f", valid from {escape(ev.valid_time)}" if ev.valid_time else ""
            lines.append(f"              evidence {ev.id} ({escape(ev.source)}{when}): {escape(ev.text)}")
    if with_ops:
        lines.append("  operations:")
        for op in graph.operations(key):
            status = "applied" if op.applied else "not applied"
            shown = op.op if op.op == op.requested else f"{op.requested} -> {op.op}"
            why = f" ({escape(op.reason)})" if op.reason else ""
            value = "None" if op.value is None else escape(op.value)
            lines.append(f"    seq {op.seq:>6}  {shown:<16} {value:<20} {status}{why}")
            if op.evidence is not None:  # why it happened: the observation behind it
                ev = graph.evidence(op.evidence)
                lines.append(f"                evidence {ev.id} ({escape(ev.source)}): {escape(ev.text)}")
    return lines


def _evidence_json(graph: KeyView, evidence: str | None) -> dict[str, Any] | None:
    if evidence is None:
        return None
    return dataclasses.asdict(graph.evidence(evidence))


def key_json(graph: KeyView, key: str, with_ops: bool = False) -> dict[str, Any]:
    """One key's view as JSON: the cell, its versions (newest first) with their evidence, and with
    ``with_ops`` its operation log with each operation's evidence (what ``describe_key`` prints)."""
    cell = graph.cell(key)
    assert cell is not None  # the caller refused unknown keys
    doc: dict[str, Any] = {
        "key": key,
        "value": cell.value,
        "status": cell.status,
        "alternatives": list(cell.alternatives),
        "support": cell.support,
        "versions": [
            {
                **{f: getattr(v, f) for f in ("id", "value", "status", "valid_from", "valid_to", "support")},
                "supersedes": v.supersedes,
                "alternative_of": v.alternative_of,
                "evidence": _evidence_json(graph, v.evidence),
            }
            for v in reversed(graph.versions(key))
        ],
    }
    if with_ops:
        doc["operations"] = [
            {**dataclasses.asdict(op), "evidence": _evidence_json(graph, op.evidence)}
            for op in graph.operations(key)
        ]
    return doc


def _cells_json(graph: ProvenanceGraph, with_empty: bool) -> list[dict[str, Any]]:
    out = []
    for key in graph:
        cell = graph.cell(key)
        assert cell is not None  # iteration yields written keys only
        if cell.value is None and not with_empty:
            continue
        out.append(
            {
                "key": key,
                "value": cell.value,
                "status": cell.status,
                "alternatives": list(cell.alternatives),
                "support": cell.support,
            }
        )
    return out


def _key_reader(args: argparse.Namespace) -> StateReader | None:
    """A reader of the keys asked for, when the view needs nothing but their cells, versions and
    operations, now or (a sharded state, whose parts keep their write logs) as of an arrival seq: the
    files read are checked and the state is read without loading it, in seconds and bounded memory
    whatever its size.
    None where the full load is needed: ``--as-of`` a time, or a seq of a single state (which keeps no
    log), or a state the reader does not read (an older schema, a journal of later writes beside it),
    whose load then reads it or says why not."""
    if not args.key:
        return None
    if args.as_of is not None and not (args.as_of.strip().isdigit() and is_sharded(args.state)):
        return None
    try:
        return StateReader(args.state)
    except StateFileError:
        return None


def run(args: argparse.Namespace) -> int:
    if args.search is not None:
        return _search(args)
    reader = _key_reader(args)
    if reader is not None:
        try:  # the reader checks each file as a key's read first needs it
            if args.as_of is None:
                return _show_keys(args, reader, None)
            seq = int(args.as_of.strip())
            return _show_keys(args, reader.as_of(seq), {"seq": seq})
        except StateFileError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    try:
        graph = ProvenanceGraph.load(args.state)
    except StateFileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    when = ""
    as_of: dict[str, Any] | None = None
    if args.as_of is not None:
        text = args.as_of.strip()
        if not text.isdigit() and not graph.has_observation_times():
            print(
                f"error: --as-of {args.as_of!r}: {args.state} records no observation times; give an "
                "operation seq (--as-of N) instead",
                file=sys.stderr,
            )
            return 2
        try:
            graph = graph.as_of(int(text)) if text.isdigit() else graph.as_of(time=text)
        except ValueError as exc:
            print(f"error: --as-of {args.as_of!r}: {exc}", file=sys.stderr)
            return 2
        when = f" as of {'seq ' if text.isdigit() else ''}{text}"
        as_of = {"seq": int(text)} if text.isdigit() else {"time": text}
    if args.key:
        return _show_keys(args, graph, as_of)
    if args.ops:
        print("error: --ops shows a key's operation log: give it with --key KEY", file=sys.stderr)
        return 2
    st = graph.stats()
    if args.json:
        cells = _cells_json(graph, args.all)
        print(json.dumps({"state": str(args.state), "as_of": as_of, "stats": st, "cells": cells}, indent=1))
        return 0
    print(
        f"{args.state}{when}: {st['cells']} cells, {st['keys']} keys, {st['versions']} versions, "
        f"{st['operations']} operations ({st['failed_operations']} not applied), {st['evidence']} evidence"
    )
    if args.all:
        for key in graph:
            cell = graph.cell(key)
            assert cell is not None  # iteration yields written keys only
            print(f"{key} = {_shown(cell.value)}  [{cell.status}]")
    else:
        print(graph.render(disclose=("support", "alternatives")))
    return 0


def _search(args: argparse.Namespace) -> int:
    """The ``--search`` view: the state's index read and the cells found read from their files (each
    checked), not the state loaded."""
    if args.key or args.as_of is not None or args.all or args.ops:
        print(
            "error: --search shows the cells nearest a query now: leave out --key, --as-of, --all and --ops",
            file=sys.stderr,
        )
        return 2
    if args.k <= 0:
        print(f"error: --k {args.k}: give how many cells at most, 1 or more", file=sys.stderr)
        return 2
    try:
        hits = StateReader(args.state).search(args.search, args.k)
    except StateFileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        found = [{"key": c.key, "value": c.value, "status": c.status, "score": c.score} for c in hits]
        print(json.dumps({"state": str(args.state), "query": args.search, "hits": found}, indent=1))
        return 0
    if not hits:
        print(f"{args.state}: no cell shares an n-gram with {args.search!r}")
    for cell in hits:
        print(f"{cell.score:.3f}  {cell.key} = {_shown(cell.value)}  [{cell.status}]")
    return 0


def _show_keys(args: argparse.Namespace, graph: KeyView, as_of: dict[str, Any] | None) -> int:
    """The ``--key`` views (text, or ``--json``)."""
    # refuse before printing anything, so that a typo is never mistaken for an answer
    missing = [key for key in dict.fromkeys(args.key) if graph.cell(key) is None]
    if missing:
        names = ", ".join(repr(key) for key in missing)
        noun = "key" if len(missing) == 1 else "keys"
        print(f"error: no such {noun} {names} in {args.state}", file=sys.stderr)
        return 2
    if args.json:
        keys = [key_json(graph, key, args.ops) for key in dict.fromkeys(args.key)]
        print(json.dumps({"state": str(args.state), "as_of": as_of, "keys": keys}, indent=1))
        return 0
    # every key read before anything is printed: a file refused midway leaves no partial answer
    print("\n".join(line for key in args.key for line in describe_key(graph, key, args.ops)))
    return 0
