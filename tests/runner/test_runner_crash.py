"""The commit protocol under a writer killed at each of its steps, and its fsync order.

A child process commits a batch and dies (``os._exit``, like SIGKILL) at a chosen step; recovery must
then leave the batch whole (every unit complete, every file present with its recorded sha256) or absent
(no unit complete, no file of it in the datasets), never half, and never disturb an earlier batch.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import pmem._atomic as atomic
from pmem.rundir import COMMITS, STAGING
from pmem.runner._store import RunStore

HERE = Path(__file__).resolve().parent


def _writer(root: Path, batch: str, step: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [sys.executable, str(HERE / "crash_writer.py"), str(root), batch, step],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def _steps(tmp: Path) -> list[str]:
    done = _writer(tmp / "trace", "b2", "none")
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def _dataset_files(root: Path) -> set[str]:
    return {
        str(p.relative_to(root))
        for d in ("results", "histories", "states")
        for p in (root / d).rglob("*")
        if p.is_file()
    }


def test_protocol_names_every_step(tmp_path: Path) -> None:
    steps = _steps(tmp_path)
    # data durable, record aside, record renamed, then each of the 4 files moved, then staging removed
    assert steps[:3] == ["data-synced", "aside:b2.json", "renamed:b2.json"]
    assert steps[3] == "recorded"
    assert steps[4:8] == [f"moved:{i}" for i in range(4)]
    assert steps[-1] == "cleaned"


def test_writer_killed_at_each_step_leaves_batch_whole_or_absent(tmp_path: Path) -> None:
    steps = _steps(tmp_path)
    committed = tmp_path / "b1-committed"
    first = _writer(committed, "b1", "none")  # an earlier batch that must survive untouched
    assert first.returncode == 0, first.stderr
    outcomes = {}
    for step in steps:
        root = tmp_path / f"run-{step.replace(':', '_')}"
        shutil.copytree(committed, root)  # the run as the earlier batch left it (a copy per step)
        before = {p: (root / p).read_bytes() for p in _dataset_files(root)}
        assert before, "the earlier batch wrote no file"
        killed = _writer(root, "b2", step)
        assert killed.returncode == 137, (step, killed.stderr)

        store = RunStore(root)
        store.recover(verify=True)
        units = {"b2-u1", "b2-u2"}
        completed = store.completed()
        files = _dataset_files(root)
        new_files = files - set(before)
        assert {p: (root / p).read_bytes() for p in before} == before, f"{step}: an earlier batch changed"
        if units <= completed:
            record = json.loads((root / COMMITS / "b2.json").read_text())
            assert new_files == {d for _, d in record["moves"]}, step
            for rel, digest in record["sha256"].items():
                assert hashlib.sha256((root / rel).read_bytes()).hexdigest() == digest, (step, rel)
            outcomes[step] = "kept"
        else:
            assert not units & completed, f"{step}: half a batch is complete"
            assert new_files == set(), f"{step}: files of an uncommitted batch are visible: {new_files}"
            outcomes[step] = "dropped"
        assert not any((root / STAGING).iterdir()), f"{step}: staging left behind"
        leftovers = [p for p in root.rglob(f"*{atomic.TMP_SUFFIX}")]
        assert not leftovers, f"{step}: temporary files left behind: {leftovers}"
    # the point of no return is the record's rename: before it the batch is dropped, from it on kept
    cut = steps.index("renamed:b2.json")
    assert [outcomes[s] for s in steps] == ["dropped"] * cut + ["kept"] * (len(steps) - cut), outcomes


def test_damaged_state_file_drops_its_batch_so_it_runs_again(tmp_path: Path) -> None:
    root = tmp_path / "run"
    assert _writer(root, "b1", "none").returncode == 0
    assert _writer(root, "b2", "none").returncode == 0
    victim = root / "states" / "a" / "b2-u1.arrow"
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    store = RunStore(root)
    store.recover()  # without verification the damage goes unseen (the cheap path runners use)
    assert store.completed() == {"b1-u1", "b1-u2", "b2-u1", "b2-u2"}
    store.recover(verify=True)
    assert store.completed() == {"b1-u1", "b1-u2"}
    assert len(store.damaged) == 1
    assert store.damaged[0].startswith(f"{victim}: checksum mismatch (recorded sha256 ")
    assert store.damaged[0].endswith("(batch b2)")
    assert not any(p.name.startswith("b2") or "part-b2" in p.name for p in root.rglob("*") if p.is_file())


class _Crash(BaseException):
    pass


def test_atomic_write_never_exposes_new_bytes_before_its_rename(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "record.json"
    atomic.atomic_write_bytes(path, b"old")

    def die(step: str) -> None:
        if step.startswith("aside:"):
            raise _Crash

    monkeypatch.setattr(atomic, "fault_hook", die)
    with pytest.raises(_Crash):
        atomic.atomic_write_bytes(path, b"new")
    assert path.read_bytes() == b"old"


def test_fsync_order_data_then_record_then_directories(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sys.path.insert(0, str(HERE))
    try:
        from crash_writer import stage_batch
    finally:
        sys.path.remove(str(HERE))
    store = RunStore(tmp_path / "run")
    store.ensure()
    staged = stage_batch(store, "b1", ["u1", "u2"])
    events: list[tuple[str, str]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        events.append(("replace", str(dst)))
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    store.commit(staged)
    root = str(store.root)
    record = f"{root}/{COMMITS}/b1.json"
    at = {e: i for i, e in reversed(list(enumerate(events)))}
    rename_record = at[("replace", record)]
    for src, dest in staged.moves:
        # every data file is on disk before the record that names it exists
        assert at[("fsync", str(staged.root / src))] < rename_record, src
        # and is moved into the datasets only after the record
        assert at[("replace", f"{root}/{dest}")] > rename_record, dest
    record_aside = [i for i, (kind, p) in enumerate(events) if kind == "fsync" and "/_commits/.b1.json." in p]
    assert record_aside and record_aside[0] < rename_record  # the record itself fsynced before its rename
    assert at[("fsync", f"{root}/{COMMITS}")] > rename_record  # and its directory after
    last_move = max(at[("replace", f"{root}/{d}")] for _, d in staged.moves)
    for folder in {str(Path(f"{root}/{d}").parent) for _, d in staged.moves}:
        assert any(kind == "fsync" and p == folder for kind, p in events[last_move - len(staged.moves) :]), (
            folder
        )
