"""``pmem._atomic``'s file copy: the whole source or what the target held, never part of either."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

import pytest

from pmem import _atomic
from pmem._atomic import TMP_SUFFIX, atomic_copy_file

if TYPE_CHECKING:
    from pathlib import Path


def test_a_copy_is_the_source_and_checks_its_hash(tmp_path: Path) -> None:
    source = tmp_path / "checkpoint.arrow"
    data = bytes(range(256)) * 4099
    source.write_bytes(data)
    target = tmp_path / "state.arrow"
    atomic_copy_file(source, target, hashlib.sha256(data).hexdigest())
    assert target.read_bytes() == data
    assert not list(tmp_path.glob(f"*{TMP_SUFFIX}"))


def test_a_source_that_no_longer_hashes_to_its_record_leaves_the_target_alone(tmp_path: Path) -> None:
    source, target = tmp_path / "checkpoint.arrow", tmp_path / "state.arrow"
    source.write_bytes(b"changed on disk")
    target.write_bytes(b"the previous state")
    with pytest.raises(ValueError, match=r"checkpoint\.arrow: its bytes no longer hash to 0+ "):
        atomic_copy_file(source, target, "0" * 64)
    assert target.read_bytes() == b"the previous state"
    assert not list(tmp_path.glob(f"*{TMP_SUFFIX}"))


def test_killed_before_the_rename_leaves_the_target_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source, target = tmp_path / "checkpoint.arrow", tmp_path / "state.arrow"
    source.write_bytes(b"new")
    target.write_bytes(b"old")

    def die(step: str) -> None:
        if step == "aside:state.arrow":
            raise KeyboardInterrupt

    monkeypatch.setattr(_atomic, "fault_hook", die)
    with pytest.raises(KeyboardInterrupt):
        atomic_copy_file(source, target)
    assert target.read_bytes() == b"old"
