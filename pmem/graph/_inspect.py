"""`pmem inspect STATE [--key KEY]`: print a saved graph's cells, or one key's full history."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import argparse

    from pmem.graph._graph import ProvenanceGraph


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("state", help="a state file written by ProvenanceGraph.save")
    parser.add_argument("--key", action="append", help="show this key's history (repeatable)")
    parser.add_argument("--all", action="store_true", help="include empty cells")
    parser.add_argument("--ops", action="store_true", help="with --key: also print the operation log")


def describe_key(graph: ProvenanceGraph, key: str, with_ops: bool = False) -> list[str]:
    cell = graph.cell(key)
    if cell is None:
        return [f"{key}: no such key"]
    lines = [f"{key} = {cell.value if cell.value is not None else '(no current value)'}  [{cell.status}]"]
    if cell.alternatives:
        lines.append(f"  alternatives: {'; '.join(cell.alternatives)}")
    lines.append("  versions (newest first):")
    for v in reversed(graph.versions(key)):
        end = "open" if v.valid_to is None else str(v.valid_to)
        lines.append(
            f"    {v.id:>8}  {v.status:<12} t={v.valid_from}..{end:<6} support={v.support}  {v.value}"
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
            when = f" @ {ev.time}" if ev.time else ""
            lines.append(f"              evidence {ev.id} ({ev.source}{when}): {ev.text}")
    if with_ops:
        lines.append("  operations:")
        for op in graph.operations(key):
            status = "applied" if op.applied else "not applied"
            shown = op.op if op.op == op.requested else f"{op.requested} -> {op.op}"
            why = f" ({op.reason})" if op.reason else ""
            lines.append(f"    seq {op.seq:>6}  {shown:<16} {op.value!s:<20} {status}{why}")
    return lines


def run(args: argparse.Namespace) -> int:
    from pmem.graph._graph import ProvenanceGraph
    from pmem.graph._state import StateFileError

    try:
        graph = ProvenanceGraph.load(args.state)
    except StateFileError as exc:
        print(f"error: {exc}")
        return 2
    if args.key:
        for key in args.key:
            print("\n".join(describe_key(graph, key, args.ops)))
        return 0
    st = graph.stats()
    print(
        f"{args.state}: {st['cells']} cells, {st['keys']} keys, {st['versions']} versions, "
        f"{st['operations']} operations ({st['failed_operations']} not applied), {st['evidence']} evidence"
    )
    if args.all:
        for key in graph:
            cell = graph.cell(key)
            value = cell.value if cell.value is not None else "(no current value)"
            print(f"{key} = {value}  [{cell.status}]")
    else:
        print(graph.render(disclose=("support", "alternatives")))
    return 0
