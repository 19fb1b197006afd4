"""A report is replaced all at once or not at all: a full disk halfway leaves the previous report intact."""

from __future__ import annotations

import builtins
import errno
import io
import os
import resource
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import pmem._atomic
from benchmarks.synthetic import write_fixture_run
from pmem.cli import main
from pmem.report import build_report


def snapshot(d: Path) -> dict[str, bytes]:
    return {p.relative_to(d).as_posix(): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


class _FullDiskFile:
    """Writes half of what it is given, then fails as a full disk does."""

    def __init__(self, f: Any) -> None:
        self._f = f

    def write(self, data: bytes | str) -> int:
        self._f.write(data[: len(data) // 2])
        self._f.flush()
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), self._f.name)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._f, name)

    def __enter__(self) -> _FullDiskFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self._f.close()


def fill_disk_at(monkeypatch: pytest.MonkeyPatch, name: str) -> list[str]:
    """The disk is full when the report writes the file that ends up as ``name`` (written directly, or aside
    under a temporary name first). Every Python-level open for writing goes through the fake."""
    real_open = builtins.open
    failed: list[str] = []

    def fake_open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        f = real_open(file, mode, *args, **kwargs)
        base = Path(os.fsdecode(file)).name if isinstance(file, str | bytes | os.PathLike) else ""
        if any(c in mode for c in "wxa") and (base == name or base.startswith(f".{name}.")):
            failed.append(base)
            return _FullDiskFile(f)
        return f

    monkeypatch.setattr(builtins, "open", fake_open)
    monkeypatch.setattr(io, "open", fake_open)
    return failed


@pytest.fixture(scope="module")
def base_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run with a report, then changed so that the next report would differ from it."""
    root = write_fixture_run(
        tmp_path_factory.mktemp("atomic") / "run", seed=3, n_alf=2, fc_questions=5, arms=("pmem", "raw")
    )
    build_report(root)
    for p in sorted((root / "results").glob("alf-chains-*.parquet"))[:3]:
        p.unlink()
    return root


@pytest.fixture
def reported_run(base_run: Path, tmp_path: Path) -> tuple[Path, dict[str, bytes]]:
    root = Path(shutil.copytree(base_run, tmp_path / "run"))
    return root, snapshot(root / "report")


def test_the_changed_run_changes_the_report(reported_run: tuple[Path, dict[str, bytes]]) -> None:
    """So the tests below would see a report that was replaced, in part or in full."""
    root, before = reported_run
    after = snapshot(build_report(root).out)
    assert after.keys() == before.keys()
    assert (
        after["report.html"] != before["report.html"]
        and after["tables/coverage.csv"] != before["tables/coverage.csv"]
    )


# every kind of file the report writes: the first table, a figure, report.md, and report.html (last)
@pytest.mark.parametrize("name", ["coverage.csv", "table6_chains.png", "report.md", "report.html"])
def test_full_disk_midway_leaves_previous_report(
    reported_run: tuple[Path, dict[str, bytes]], monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    root, before = reported_run
    failed = fill_disk_at(monkeypatch, name)
    with pytest.raises(OSError, match="No space left on device"):
        build_report(root)
    assert failed  # the full disk was met
    assert snapshot(root / "report") == before  # byte for byte, and no temporary file left behind


def test_killed_while_renaming_leaves_the_old_pages(
    reported_run: tuple[Path, dict[str, bytes]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Renames need no space but a writer can die between them: report.md and report.html go last, so
    until every table and figure they refer to is in place, a reader sees the previous pages."""
    root, before = reported_run

    class Killed(BaseException):
        pass

    def die(step: str) -> None:
        if step == "report:renamed:tables/coverage.csv":
            raise Killed

    monkeypatch.setattr(pmem._atomic, "fault_hook", die)
    with pytest.raises(Killed):
        build_report(root)
    after = snapshot(root / "report")
    assert after["tables/coverage.csv"] != before["tables/coverage.csv"]  # the first file was renamed
    assert (after["report.md"], after["report.html"]) == (before["report.md"], before["report.html"])


def test_stale_figures_go_only_when_the_new_report_is_in_place(
    reported_run: tuple[Path, dict[str, bytes]],
) -> None:
    root, _ = reported_run
    out = root / "report"
    (out / "figures" / "gone.png").write_bytes(b"\x89PNG old figure")
    (out / "compare-x").mkdir()
    (out / "compare-x" / "report.md").write_text("kept")
    build_report(root)
    assert not (out / "figures" / "gone.png").exists()
    assert (out / "compare-x" / "report.md").read_text() == "kept"


def test_cli_full_disk_is_a_one_line_error(
    reported_run: tuple[Path, dict[str, bytes]],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    root, before = reported_run
    fill_disk_at(monkeypatch, "report.html")
    assert main(["report", str(root)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "No space left on device" in err and "previous report is left as it was" in err
    assert snapshot(root / "report") == before


@pytest.mark.skipif(not hasattr(resource, "RLIMIT_FSIZE"), reason="needs RLIMIT_FSIZE")
def test_os_refusing_a_write_leaves_previous_report(reported_run: tuple[Path, dict[str, bytes]]) -> None:
    """The operating system, not a patched function, refuses the write: the `pmem report` process may not
    grow a file past a limit halfway between report.html (about 200 kB here, the largest file) and the
    next largest file, so report.html alone cannot be written in full."""
    root, before = reported_run
    others = max(len(v) for k, v in before.items() if k != "report.html")
    cap = (len(before["report.html"]) + others) // 2
    assert len(before["report.html"]) > cap > others + 16 * 1024  # margin: this run's files differ a little

    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a refused write then fails with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (cap, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    p = subprocess.run(
        [sys.executable, "-m", "pmem.cli", "report", str(root)],
        capture_output=True,
        text=True,
        preexec_fn=limit,
        env=env,
        timeout=300,
        check=False,
    )
    assert snapshot(root / "report") == before
    assert p.returncode != 0
    assert "File too large" in p.stderr and "Traceback" not in p.stderr and p.stderr.count("\n") == 1
