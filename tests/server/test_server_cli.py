"""``pmem mcp``'s bad input: one line naming what is wrong, exit 2, nothing started."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from mcp_client import command


def _run(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PMEM_MCP_")}
    return subprocess.run(
        [*argv],
        capture_output=True,
        text=True,
        timeout=120,
        env={**clean, **(env or {})},
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.parametrize(
    ("setup", "extra", "env", "says"),
    [
        ("", ["--http"], {}, "needs a bearer token: set PMEM_MCP_TOKEN"),
        ("", ["--http"], {"PMEM_MCP_TOKENS": "[1, 2]"}, "PMEM_MCP_TOKENS: a JSON object"),
        ("", ["--http"], {"PMEM_MCP_TOKENS": "{not json"}, "PMEM_MCP_TOKENS: not JSON"),
        ("[models.judge]\nbackend = 'heuristic'\n", [], {}, "unknown key(s) ['models.judge']"),
        ("[models\n", [], {}, "not TOML"),
        ("[memory]\nnonsense = 1\n", [], {}, "unknown option(s) ['nonsense']"),
    ],
)
def test_a_bad_configuration_is_one_line_and_exit_2(
    tmp_path: Path, setup: str, extra: list[str], env: dict[str, str], says: str
) -> None:
    args = list(extra)
    if setup:
        (tmp_path / "config.toml").write_text(setup)
        args += ["--config", str(tmp_path / "config.toml")]
    done = _run(*command(tmp_path / "store", *args), env=env)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pmem mcp: error: ") and says in lines[0], done.stderr


def test_a_store_that_is_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "store").write_text("not a directory")
    done = _run(*command(tmp_path / "store"))
    assert done.returncode == 2 and "a store is a directory" in done.stderr, done.stderr
    assert (tmp_path / "store").read_text() == "not a directory"
