"""Which P-Mem source a process runs (``pmem._source.source_commit``): a checkout's commit, marked
``+dirty`` when its tracked files differ; nothing outside a checkout."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import pmem._source
from pmem._source import source_commit


def _git(repo: Path, *args: str) -> str:
    argv = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args]
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout.strip()


def test_a_checkouts_commit_then_dirty_then_none_outside_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "pmem").mkdir()
    (tmp_path / "pmem" / "x.py").write_text("x = 1\n")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", "pmem/x.py")
    _git(tmp_path, "commit", "-q", "-m", "one")
    monkeypatch.setattr(pmem._source, "_CHECKOUT", tmp_path)
    head = _git(tmp_path, "rev-parse", "HEAD")
    assert source_commit() == head and len(head) == 40
    (tmp_path / "untracked.txt").write_text("not part of the source")
    assert source_commit() == head  # untracked files do not make it dirty
    (tmp_path / "pmem" / "x.py").write_text("x = 2\n")
    assert source_commit() == f"{head}+dirty"
    monkeypatch.setattr(pmem._source, "_CHECKOUT", tmp_path / "pmem")  # no .git: an installed package
    assert source_commit() is None
