"""Committed files are checked against the sha256 the runner recorded in ``_commits/``: a damaged or
missing one is named in the report and on stderr, and the report is built from what is intact."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from benchmarks.synthetic import write_fixture_run
from pmem.cli import main
from pmem.report import build_report, compute, open_run

ARMS = ("pmem", "raw")


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def commit(
    root: Path,
    batch: str,
    moved: list[Path],
    *,
    time: float,
    checksums: bool = True,
    drop: tuple[str, ...] = (),
) -> None:
    """A commit record as the runner writes it (``sha256`` from the runner version that records it)."""
    rels = [p.relative_to(root).as_posix() for p in moved]
    rec = {
        "batch": batch,
        "staging": f"_staging/r0/{batch}",
        "units": [f"u-{batch}-{i}" for i in range(len(rels))],
        "moves": [[rel, rel] for rel in rels],
        "drop": list(drop),
        "time": time,
    }
    if checksums:
        rec["sha256"] = {rel: sha(root / rel) for rel in rels}
    (root / "_commits").mkdir(exist_ok=True)
    (root / "_commits" / f"{batch}.json").write_text(json.dumps(rec))


def write_state(path: Path, history: str, n: int) -> Path:
    """A small Arrow file standing in for a saved graph (the report checks bytes; it never loads a state)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.table({"key": [f"{history}.k{i}" for i in range(n)], "value": [f"v{i}" for i in range(n)]})
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as w:
        w.write_table(table)
    return path


def flip_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.fixture(scope="module")
def committed_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small run whose results and states were committed in two batches with checksums."""
    root = write_fixture_run(
        tmp_path_factory.mktemp("integrity") / "run", seed=4, n_alf=2, fc_questions=5, arms=ARMS
    )
    results = sorted((root / "results").glob("*.parquet"))
    states = [
        write_state(root / "states" / arm / f"{p.stem}.0123456789.arrow", p.stem, 3)
        for p in results
        for arm in ARMS
    ]
    half = len(results) // 2
    commit(root, "b0", results[:half] + states[: 2 * half], time=1.0)
    commit(root, "b1", results[half:] + states[2 * half :], time=2.0)
    return root


@pytest.fixture
def run_dir(committed_base: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(committed_base, tmp_path / "run"))


def a_state(root: Path) -> str:
    return sorted(p.relative_to(root).as_posix() for p in (root / "states").rglob("*.arrow"))[3]


def results_rows(root: Path) -> int:
    return sum(pq.read_metadata(p).num_rows for p in (root / "results").glob("*.parquet"))


def test_intact_run_has_no_warnings(run_dir: Path) -> None:
    run = open_run(run_dir)
    assert run.damaged == []
    assert compute(run).accuracy["n"].sum() == results_rows(run_dir)


def test_flipped_byte_in_a_state_is_named(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rel = a_state(run_dir)
    recorded = sha(run_dir / rel)
    flip_byte(run_dir / rel)
    assert main(["report", str(run_dir)]) == 0  # the report is still built
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"pmem report: warning: {rel}: checksum mismatch (recorded sha256 {recorded[:12]}…, "
        f"file has {sha(run_dir / rel)[:12]}…)"
    ]
    md = (run_dir / "report" / "report.md").read_text()
    html = (run_dir / "report" / "report.html").read_text()
    assert "## Integrity warnings" in md and f"- {rel}: checksum mismatch" in md
    assert "Integrity warnings" in html and rel in html
    # the warning opens the report, ahead of every table
    assert md.index("Integrity warnings") < md.index("## Run coverage")
    # a state is not read by the report: every result row still counts
    assert compute(open_run(run_dir)).accuracy["n"].sum() == results_rows(run_dir)


def test_missing_state_is_named(run_dir: Path) -> None:
    rel = a_state(run_dir)
    (run_dir / rel).unlink()
    paths = build_report(run_dir)
    assert len(paths.warnings) == 1 and paths.warnings[0].startswith(f"{rel}: missing")
    assert rel in paths.markdown.read_text()


def test_damaged_results_file_is_named_and_left_out(run_dir: Path) -> None:
    victim = sorted((run_dir / "results").glob("fc-*.parquet"))[0]
    rows = pq.read_metadata(victim).num_rows
    total = results_rows(run_dir)
    flip_byte(victim)
    run = open_run(run_dir)
    assert [d.path for d in run.damaged] == [victim.relative_to(run_dir).as_posix()]
    assert victim not in run.files["results"]
    assert compute(run).accuracy["n"].sum() == total - rows


def test_newest_record_wins_and_dropped_files_are_not_missing(run_dir: Path) -> None:
    """A later batch that rewrote a state records its new digest; one that dropped a file removed it."""
    rewritten = run_dir / a_state(run_dir)
    write_state(rewritten, "rewritten", 5)
    dropped = sorted((run_dir / "states").rglob("*.arrow"))[0]
    dropped.unlink()
    commit(run_dir, "b2", [rewritten], time=3.0, drop=(dropped.relative_to(run_dir).as_posix(),))
    assert open_run(run_dir).damaged == []


def test_records_without_checksums_verify_nothing(run_dir: Path) -> None:
    for rec in (run_dir / "_commits").glob("*.json"):
        doc = json.loads(rec.read_text())
        del doc["sha256"]
        rec.write_text(json.dumps(doc))
    flip_byte(run_dir / a_state(run_dir))
    assert open_run(run_dir).damaged == []


def test_unreadable_commit_record_is_named(run_dir: Path) -> None:
    (run_dir / "_commits" / "b1.json").write_text('{"batch": "b1", "moves": [')
    damaged = open_run(run_dir).damaged
    assert [d.path for d in damaged] == ["_commits/b1.json"]
    assert "cannot be verified" in damaged[0].reason
