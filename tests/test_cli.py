"""The surface a newcomer meets: `pmem --help`, `pmem --version`, and help text on every option."""

from __future__ import annotations

import argparse
import importlib.metadata
import subprocess
import sys

import pytest

import pmem
from pmem import cli


def _pmem(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pmem.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


def test_help_describes_the_project_and_every_command() -> None:
    proc = _pmem("--help")
    assert proc.returncode == 0, proc.stderr
    assert "The `pmem` command." not in proc.stdout
    assert "provenance graph" in proc.stdout and "pmem demo" in proc.stdout
    for name in cli.COMMANDS:
        assert name in proc.stdout


def test_version_is_the_package_version() -> None:
    proc = _pmem("--version")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"pmem {pmem.__version__}"
    # one version: the installed metadata reads it from pmem.__version__
    assert importlib.metadata.version("pmem") == pmem.__version__


def _options_without_help(parser: argparse.ArgumentParser, where: str) -> list[str]:
    missing = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                missing += _options_without_help(sub, f"{where} {name}")
            continue
        if isinstance(action, argparse._HelpAction | argparse._VersionAction):
            continue
        if action.help == argparse.SUPPRESS:
            continue  # hidden on purpose (internal flags)
        if not action.help:
            missing.append(f"{where} {'/'.join(action.option_strings) or action.dest}")
    return missing


@pytest.mark.parametrize("command", sorted(cli.COMMANDS))
def test_every_option_has_help_text(command: str) -> None:
    parser, targets = cli._parser([command])
    sub = parser._subparsers._group_actions[0].choices[command]  # type: ignore[union-attr]
    assert command in targets
    assert _options_without_help(sub, command) == []


@pytest.mark.parametrize("target", sorted(cli.PERF))
def test_every_perf_option_has_help_text(target: str) -> None:
    parser, targets = cli._parser(["perf", target])
    perf = parser._subparsers._group_actions[0].choices["perf"]  # type: ignore[union-attr]
    sub = perf._subparsers._group_actions[0].choices[target]  # type: ignore[union-attr]
    assert f"perf:{target}" in targets
    assert _options_without_help(sub, f"perf {target}") == []


@pytest.mark.parametrize("command", sorted(cli.COMMANDS))
def test_every_command_has_a_description(command: str) -> None:
    """`pmem COMMAND --help` says what the command does (`pmem demo --help` said nothing, issue 41)."""
    parser, _ = cli._parser([command])
    sub = parser._subparsers._group_actions[0].choices[command]  # type: ignore[union-attr]
    assert sub.description and len(sub.description) > 20, command


def test_demo_help_says_the_agent_is_rule_based() -> None:
    proc = _pmem("demo", "--help")
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stdout.split())
    assert "quickstart" in text and "no LLM" in text


def test_erase_usage_shows_which_form_requires_out() -> None:
    """`--out` is required to erase from a state, though argparse cannot require it (a run directory
    takes --history instead): the usage shows both forms, --out not as an optional."""
    proc = _pmem("erase", "--help")
    assert proc.returncode == 0, proc.stderr
    usage = proc.stdout.split("\n\n", 1)[0]
    assert usage.splitlines() == [
        "usage: pmem erase STATE EVIDENCE_ID --out NEW_STATE",
        "       pmem erase RUN_DIR EVIDENCE_ID --history HISTORY_ID [--arm ARM]",
    ]
    assert "[--out" not in usage and "required for a state" in proc.stdout
