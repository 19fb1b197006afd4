"""The `pmem` command: Provenant Memory and the harness that compares agent memories.

Each subcommand lives next to the code it drives, in a module exposing
``add_arguments(parser)`` and ``run(args) -> int``; this file only maps names to modules and imports
them lazily, so `pmem inspect` never pays for Ray or Polars.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import TYPE_CHECKING

from pmem import __version__
from pmem._exit import EXIT_INTERRUPTED

if TYPE_CHECKING:
    from types import ModuleType

#: What `pmem --help` says before the command list.
DESCRIPTION = """\
P-Mem keeps an agent's facts as a typed provenance graph: the current value of each fact is committed
on arrival and what it displaces is kept. This command runs the evaluation harness that compares agent
memory designs on benchmarks (sweeps on an embedded Ray or a cluster, reports), and inspects saved graphs.
"""

#: Shown under the command list: where a newcomer starts.
EPILOG = """\
start here:
  pmem demo                        a real sweep of the quickstart config, then its report
  pmem sweep jobs/quickstart.toml  run a sweep config; prints the run directory
  pmem report RUN_DIR              tables and plots of a run (RUN_DIR/report/)
  pmem COMMAND --help              the options of one command
"""

# name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "sweep": (
        "pmem.runner._cli_sweep",
        "run memory arms over benchmarks as a config says (embedded Ray, or --address)",
    ),
    "report": (
        "pmem.report._cli",
        "accuracy, stale-answer, cost and audit tables and plots of a run (RUN_DIR/report/)",
    ),
    "inspect": (
        "pmem.graph._read._inspect",
        "print a saved P-Mem graph: current values, or one key's versions and evidence",
    ),
    "index": (
        "pmem.graph._read._index_cli",
        "build a saved state's search index, part by part (for pmem inspect --search, StateReader.search)",
    ),
    "erase": (
        "pmem._erase_cli",
        "erase one evidence item from a saved graph into a new state file; print the receipt",
    ),
    "ingest": (
        "pmem.ingest._cli",
        "build one P-Mem state from a stream (JSONL, Parquet, Arrow) on Ray; resumable",
    ),
    "bench": ("pmem.bench._cli", "list the benchmarks, check their data files, print parser coverage"),
    "models": (
        "pmem.models._cli",
        "prepare packaged weights for vLLM (converted once) and check vLLM's CPU build here",
    ),
    "arms": ("pmem.arms._cli", "measure the memory arms on their acceptance workloads"),
    "rejudge": (
        "pmem._rejudge_cli",
        "judge a finished run's answers again with today's judge (the old verdicts kept; resumable)",
    ),
    "demo": ("pmem._demo", "the quickstart: a real sweep with the embedded defaults, then its report"),
    "report-screenshot": (
        "pmem.report._screenshot",
        "render a run's report.html in headless Chromium to a PNG",
    ),
    "mcp": (
        "pmem.server._cli",
        "serve memories over MCP (stdio, or --http on 127.0.0.1): add, search, history, as_of, why, undo, erase",
    ),
    "serve": (
        "pmem.models.server",
        "an OpenAI-compatible server on 127.0.0.1 (deterministic heuristic agent, hashing embedder)",
    ),
}

PERF: dict[str, tuple[str, str]] = {
    "core": ("benchmarks.core", "1M operations over 100k keys vs a bare loop; undo and erase"),
    "state": ("benchmarks.state", "save/load 1M operations vs plain pyarrow; one key of a 10M-op state"),
    "reader": (
        "benchmarks.reader",
        "a 10M-fact sharded state read without loading it: open, one key, the frontier vs a full load",
    ),
    "client": ("benchmarks.client", "OpenAI client throughput vs ideal; heuristic calls/s"),
    "bench": ("benchmarks.bench", "load and build the 262k FactConsolidation histories"),
    "arms": ("benchmarks.arms", "262k stream through P-Mem's template write path; state-read latency"),
    "sweep": ("benchmarks.sweep", "5,000 ALFWorld-Revision histories on local Ray, 1 vs 2 runners"),
    "report": ("benchmarks.report", "aggregations over 1M result rows and 5M request rows"),
    "ingest": (
        "benchmarks.ingest",
        "pmem ingest: bulk apply vs one call per op; 1 vs 2 partitions; 1 vs 2 agent replicas",
    ),
    "memory": (
        "benchmarks.memory",
        "pmem.Memory's add and search per call vs the pmem arm's own path, over 10,000 cells",
    ),
    "server": (
        "benchmarks.server",
        "pmem mcp's durable add and search at 1k, 100k and 1M facts in a namespace; in-process search",
    ),
    "judge": (
        "benchmarks.judge",
        "the judge of a sweep config on the calibration set: accept rates per kind, model alone vs rules + model",
    ),
    "llm": (
        "benchmarks.llm",
        "SmolLM2-135M on Ray-hosted llama.cpp or vLLM (CPU) replicas: harness vs bare loop; engine vs engine",
    ),
}


def _version() -> str:

    return __version__


#: The top-level modules of the `eval` extra (pyproject.toml): a command that imports one of them on a
#: light install is told, in one line, which extra to install.
EXTRA_OF: dict[str, str] = {
    "ray": "eval",
    "polars": "eval",
    "sklearn": "eval",
    "scipy": "eval",  # scikit-learn's; the memory's index uses it when present
    "matplotlib": "eval",
    "tqdm": "eval",
    "PIL": "eval",
    "uvloop": "eval",
    "nltk": "eval",  # LoCoMo's official scorer
}


def missing_extra_message(command: str, module: str) -> str | None:
    """The line for a command stopped by a missing module of an extra (None for any other module).

    >>> missing_extra_message("sweep", "ray.util")
    "pmem sweep needs the evaluation system, which this install lacks (no module 'ray'): pip install 'pmem[eval]'"
    """
    top = module.split(".")[0]
    extra = EXTRA_OF.get(top)
    if extra is None:
        return None
    return f"pmem {command} needs the evaluation system, which this install lacks (no module {top!r}): pip install 'pmem[{extra}]'"


def _load(module: str, command: str) -> ModuleType:
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.split(".")[0] == "benchmarks":  # tooling of a source checkout, not product
            msg = (
                f"{module} is not importable: it is tooling of a P-Mem source checkout; there, run "
                f"`python -m {module}` or install it with `pip install -e .`"
            )
            raise SystemExit(msg) from exc
        if exc.name and exc.name.startswith("pmem"):
            msg = f"this command is not available in this build ({module} is missing)"
            raise SystemExit(msg) from exc
        msg = missing_extra_message(command, exc.name or "") or (
            f"missing dependency {exc.name!r}: install the project with `pip install -e .` (see README)"
        )
        print(msg, file=sys.stderr)
        raise SystemExit(2) from exc  # a missing part of the install is refused like any bad input


def _parser(argv: list[str]) -> tuple[argparse.ArgumentParser, dict[str, ModuleType]]:
    parser = argparse.ArgumentParser(
        prog="pmem",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    # each module exposes add_arguments(parser) and run(args) -> int (see the module docstring)
    targets: dict[str, ModuleType] = {}
    wanted = argv[0] if argv else None
    for name, (module, help_) in COMMANDS.items():
        # the one-line help is the description of `pmem NAME --help` unless the command gives a longer one
        p = sub.add_parser(name, help=help_, description=help_)
        if name == wanted:
            mod = _load(module, name)
            mod.add_arguments(p)
            targets[name] = mod
    perf = sub.add_parser("perf", help="speed benchmarks (each prints ratios against a same-run baseline)")
    perf_sub = perf.add_subparsers(dest="perf_target", metavar="TARGET")
    perf_wanted = argv[1] if wanted == "perf" and len(argv) > 1 else None
    for name, (module, help_) in PERF.items():
        p = perf_sub.add_parser(name, help=help_, description=help_)
        if name == perf_wanted:
            mod = _load(module, f"perf {name}")
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
    try:
        code = int(targets[key].run(args) or 0)
    except ModuleNotFoundError as exc:
        # a command reached an optional part of the project on a light install (`pip install pmem`)
        line = missing_extra_message(key.replace(":", " "), exc.name or "")
        if line is None:
            raise
        print(line, file=sys.stderr)
        return 2
    except BrokenPipeError:
        # the reader went away (`pmem inspect STATE | head`): what it read is all it wanted; Python's
        # advice: point stdout at devnull so the interpreter's final flush does not fail again
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except OSError as exc:
        # the machine's answer about a file (missing, a folder, no permission, read-only, a full disk)
        # names the file: that line is the whole story; a command's own errors are handled in it
        name = f"pmem {key.replace(':', ' ')}"
        where = f"{exc.filename}: " if exc.filename and str(exc.filename) not in str(exc) else ""
        print(f"{name}: error: {where}{' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    if code == EXIT_INTERRUPTED:
        # Ctrl-C: the command has said what it kept. Ray's threads may still be winding down, and the
        # interpreter's own teardown can crash on them (SIGSEGV after the message): leave now instead
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
