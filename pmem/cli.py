"""The `pmem` command.

Each subcommand lives next to the code it drives, in a module exposing
``add_arguments(parser)`` and ``run(args) -> int``; this file only maps names to modules and imports
them lazily, so `pmem inspect` never pays for Ray or Polars.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "sweep": ("pmem.runner._cli_sweep", "run a sweep config (embedded Ray, or --address)"),
    "report": ("pmem.report._cli", "write RUN_DIR/report/ from a run's Parquet files"),
    "inspect": ("pmem.graph._inspect", "print a saved P-Mem graph's cells and history"),
    "bench": ("pmem.bench._cli", "list benchmarks, check data, print parser coverage"),
    "arms": ("pmem.arms._cli", "run the memory arms' acceptance measurements"),
    "demo": ("pmem._demo", "the quickstart: a real sweep with the embedded defaults"),
    "report-screenshot": ("pmem.report._screenshot", "render a report in headless Chromium to PNG"),
    "serve": ("pmem.models.server", "serve the heuristic agent and hashing embedder over the OpenAI protocol"),
}

PERF: dict[str, tuple[str, str]] = {
    "core": ("pmem.graph._perf", "1M operations over 100k keys vs a bare loop; save/load"),
    "client": ("pmem.models._perf", "OpenAI client throughput vs ideal; heuristic calls/s"),
    "bench": ("pmem.bench._perf", "load and build the 262k FactConsolidation histories"),
    "arms": ("pmem.arms._perf", "262k stream through P-Mem's template write path; state-read latency"),
    "sweep": ("pmem.runner._perf", "5,000 ALFWorld-Revision histories on local Ray, 1 vs 2 runners"),
    "report": ("pmem.report._perf", "aggregations over 1M result rows and 5M request rows"),
}


def _load(module: str):
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.startswith("pmem"):
            msg = f"this command is not available in this build ({module} is missing)"
            raise SystemExit(msg) from exc
        msg = f"missing dependency {exc.name!r}: install the project with `pip install -e .` (see README)"
        raise SystemExit(msg) from exc


def _parser(argv: list[str]) -> tuple[argparse.ArgumentParser, dict[str, object]]:
    parser = argparse.ArgumentParser(prog="pmem", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    targets: dict[str, object] = {}
    wanted = argv[0] if argv else None
    for name, (module, help_) in COMMANDS.items():
        p = sub.add_parser(name, help=help_)
        if name == wanted:
            mod = _load(module)
            mod.add_arguments(p)
            targets[name] = mod
    perf = sub.add_parser("perf", help="speed benchmarks (each prints ratios against a same-run baseline)")
    perf_sub = perf.add_subparsers(dest="perf_target", metavar="TARGET")
    perf_wanted = argv[1] if wanted == "perf" and len(argv) > 1 else None
    for name, (module, help_) in PERF.items():
        p = perf_sub.add_parser(name, help=help_)
        if name == perf_wanted:
            mod = _load(module)
            mod.add_arguments(p)
            targets[f"perf:{name}"] = mod
    return parser, targets


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser, targets = _parser(argv)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    key = f"perf:{args.perf_target}" if args.command == "perf" else args.command
    if args.command == "perf" and args.perf_target is None:
        parser.parse_args(["perf", "--help"])
    return int(targets[key].run(args) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
