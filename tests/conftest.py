"""Shared fixtures. One local Ray cluster for the whole test session, started on first use."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

#: Logical GPUs let the vLLM-hosting path (placement, one replica per GPU) run on a CPU-only machine.
LOGICAL_GPUS = 4


@pytest.fixture(scope="session")
def ray_cluster():
    """The session's Ray: a new local cluster (never one found on the machine), shut down and its
    session folder removed at the end. Tests must not call ray.init themselves."""
    ray = pytest.importorskip("ray")
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    # Ray's sockets live under its temp dir and a Unix socket path is at most 107 bytes: keep it short.
    temp_dir = tempfile.mkdtemp(prefix="pmem-ray-", dir="/tmp")
    if not ray.is_initialized():
        ray.init(  # address="local": a new cluster, never one found on the machine
            address="local",
            num_cpus=4,
            num_gpus=LOGICAL_GPUS,
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
            _temp_dir=temp_dir,
        )
    yield ray
    ray.shutdown()
    remove_ray_temp_dir(temp_dir)


def _processes_naming(needle: str) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if needle.encode() in f.read():
                        pids.append(int(entry))
            except OSError:
                continue
    return pids


def remove_ray_temp_dir(temp_dir: str, timeout_s: float = 60) -> None:
    """Remove a Ray temp dir once the processes of its cluster are gone (bounded).

    ``ray.shutdown()`` returns while the head's processes are still exiting and writing their logs, so a
    plain rmtree right after it can leave a half-removed folder behind.
    """
    import time

    deadline = time.monotonic() + timeout_s
    while _processes_naming(temp_dir) and time.monotonic() < deadline:
        time.sleep(0.1)
    for _ in range(20):
        shutil.rmtree(temp_dir, ignore_errors=True)
        if not os.path.exists(temp_dir):
            return
        time.sleep(0.1)


@pytest.fixture
def private_ray_tmpdir():
    """A RAY_TMPDIR for subprocesses that start their own Ray, removed afterwards (short path: sockets)."""
    path = tempfile.mkdtemp(prefix="pmem-rt-", dir="/tmp")
    yield path
    remove_ray_temp_dir(path)


@pytest.fixture
def tmpfs(tmp_path):
    """Mount small tmpfs folders (``tmpfs(size_kib, read_only=False) -> Path``) for a full or read-only
    disk; skipped where this process may not mount (CI and the developers' machines run as root)."""
    import subprocess

    mounted = []

    def mount(size_kib: int, read_only: bool = False):
        where = tmp_path / f"mnt{len(mounted)}"
        where.mkdir()
        options = f"size={size_kib}k" + (",ro" if read_only else "")
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)], capture_output=True, text=True
        )
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
        mounted.append(where)
        return where

    yield mount
    for where in mounted:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def fill_disk(folder, leave: int = 0):
    """Fill ``folder``'s file system (a small ``tmpfs``) but for about ``leave`` bytes; the filler file,
    whose removal gives the space back."""
    filler = folder / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError:  # full
        pass
    finally:
        os.close(fd)
    os.truncate(filler, max(0, filler.stat().st_size - leave))
    return filler


@pytest.fixture(name="fill_disk")
def fill_disk_fixture():
    """:func:`fill_disk`, for the tests that fill a ``tmpfs``."""
    return fill_disk


@pytest.fixture(scope="session")
def quickstart(tmp_path_factory: pytest.TempPathFactory):
    """The quickstart config with a progress line every 0.2 s, and an output folder
    (tests/quickstart_sweep.py)."""
    from quickstart_sweep import quickstart_config

    tmp = tmp_path_factory.mktemp("quickstart")
    return quickstart_config(tmp), tmp / "runs"


@pytest.fixture(scope="session")
def quickstart_first_run(ray_cluster, quickstart):
    """The quickstart's first histories, swept once per test process through ``pmem sweep --limit 1`` at
    ``COLUMNS=100`` without --summary or --verbose (what it printed; its run directory)."""
    from quickstart_sweep import sweep

    config, out = quickstart
    with pytest.MonkeyPatch.context() as mp:
        return sweep(str(config), "--out", str(out), "--limit", "1", monkeypatch=mp)
