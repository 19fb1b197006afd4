"""Issue 28 on `pmem ingest`: time is time (never a key or a value), an ingest that extracts nothing
says so, an output never destroys an input or another run's output, and bad paths are one line."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from pmem.graph import ProvenanceGraph
from pmem.ingest import ingest
from pmem.ingest._workdir import workdir_of

REPO = Path(__file__).resolve().parents[2]
CONFIG = '[models.agent]\nbackend = "heuristic"\n[models.embedder]\nbackend = "hashing"\n[ingest]\nbatch_events = 64\n'


def moves_and_retractions(objects: int, rows: int, seed: int) -> tuple[list[dict], dict[str, str]]:
    """Object moves and corrections of the last move, each row with a ``time``; and, computed here
    from the generator's own bookkeeping, each object's final location."""
    rng = random.Random(seed)
    history: dict[str, list[str]] = {}
    out: list[dict] = []
    for i in range(rows):
        obj = f"cup {rng.randint(1, objects)}"
        seen = history.setdefault(obj, [])
        when = f"2026-01-01T{i // 3600:02d}:{i // 60 % 60:02d}:{i % 60:02d}"
        if len(seen) >= 2 and rng.random() < 0.15:
            wrong = seen.pop()  # the last move was an error: the object is back where it was
            text = f"Correction: the report that {obj} was moved to {wrong} was an error."
        elif not seen:
            seen.append(f"countertop {rng.randint(1, 40)}")
            text = f"Earlier observation: {obj} was in {seen[-1]}."
        else:
            new = f"drawer {rng.randint(1, 40)}"
            while new == seen[-1]:
                new = f"drawer {rng.randint(1, 40)}"
            text = f"Update: {obj} has been moved from {seen[-1]} to {new}."
            seen.append(new)
        out.append({"text": text, "time": when})
    return out, {obj: seen[-1] for obj, seen in history.items()}


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_time_is_the_evidences_time_never_a_key_or_a_value(ray_cluster, tmp_path: Path) -> None:
    rows, expected = moves_and_retractions(objects=40, rows=400, seed=11)
    cfg = tmp_path / "ingest.toml"
    cfg.write_text(CONFIG)
    timed = _write(tmp_path / "timed.jsonl", rows)
    plain = _write(tmp_path / "plain.jsonl", [{"text": r["text"]} for r in rows])
    outs = {}
    for name, stream, partitions in (("t1", timed, 1), ("t2", timed, 2), ("plain", plain, 1)):
        outs[name] = tmp_path / f"{name}.arrow"
        ingest(stream, outs[name], config=cfg, partitions=partitions, progress=False)
    assert outs["t1"].read_bytes() == outs["t2"].read_bytes()
    graph = ProvenanceGraph.load(outs["t1"])
    frontier = dict(graph.frontier_items())
    assert frontier == dict(ProvenanceGraph.load(outs["plain"]).frontier_items())
    assert all(not k.startswith(("2026", "[")) and "2026" not in v for k, v in frontier.items())
    at = {obj: frontier.get(f"{obj.replace(' ', '_')}.location") for obj in expected}
    right = sum(at[obj] == loc for obj, loc in expected.items())
    assert right / len(expected) >= 0.99, {o: (at[o], loc) for o, loc in expected.items() if at[o] != loc}
    # the row's time is the evidence's time
    op = next(iter(graph.operations()))
    assert graph.evidence(op.evidence).time == rows[0]["time"]


def pmem_ingest(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pmem.cli", "ingest", *argv, "--no-progress"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=600,
    )


def ingest_here(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    """``pmem ingest`` in this process, on the session's Ray (a subprocess starts a cluster of its own,
    seconds each): its exit code and what it wrote to stderr."""
    from pmem.cli import main

    capsys.readouterr()
    code = main(["ingest", *argv, "--no-progress"])
    return code, capsys.readouterr().err


def test_an_ingest_that_extracts_nothing_says_why_and_exits_1(
    ray_cluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stream = _write(
        tmp_path / "s.jsonl", [{"text": "Alice moved to Berlin."}, {"text": "Bob's phone is 555-1234."}]
    )
    code, err = ingest_here(capsys, str(stream), "--out", str(tmp_path / "s.arrow"))
    assert code == 1, err
    assert "extracted no fact from 2 events" in err and "heuristic" in err
    assert "--allow-empty" in err and (tmp_path / "s.arrow").is_file()  # nothing lost
    code, err = ingest_here(capsys, str(stream), "--out", str(tmp_path / "s.arrow"), "--allow-empty")
    assert code == 0 and "already complete" in err
    bad = _write(tmp_path / "bad.jsonl", [{"text": ""}, {"nope": 1}])
    code, err = ingest_here(capsys, str(bad), "--out", str(tmp_path / "b.arrow"), "--skip-bad")
    assert code == 1 and "every row of the stream was rejected (2" in err


def test_an_output_that_would_destroy_an_input_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # refused before any cluster starts: run in this process (a subprocess costs most of a second)
    stream = _write(tmp_path / "same.jsonl", [{"text": "Earlier observation: cup 1 was in countertop 2."}])
    before = stream.read_bytes()
    os.symlink(stream, tmp_path / "link.arrow")
    (tmp_path / "dir").mkdir()
    cases = {
        "same": (str(stream), "is the stream itself"),
        "link": (str(tmp_path / "link.arrow"), "is the stream itself"),
        "dir": (str(tmp_path / "dir"), "is a directory; give the state file's path"),
    }
    for out, needle in cases.values():
        code, err = ingest_here(capsys, str(stream), "--out", out)
        assert code == 2 and needle in err, err
        assert len(err.strip().splitlines()) == 1
    inside = workdir_of(tmp_path / "x.arrow")
    inside.mkdir()
    (inside / "s.jsonl").write_bytes(before)
    code, err = ingest_here(capsys, str(inside / "s.jsonl"), "--out", str(tmp_path / "x.arrow"))
    assert code == 2 and "inside its working folder" in err
    code, err = ingest_here(capsys, str(tmp_path / "dir"), "--out", str(tmp_path / "y.arrow"))
    assert code == 2 and "is a directory, not a stream file" in err
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    code, err = ingest_here(capsys, str(fifo), "--out", str(tmp_path / "y.arrow"))
    assert code == 2 and "not a regular file" in err
    assert stream.read_bytes() == before


def test_a_second_ingest_into_one_output_is_refused_naming_the_first(
    ray_cluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from pmem._lock import hold_exclusive

    stream = _write(tmp_path / "s.jsonl", [{"text": "Earlier observation: cup 1 was in countertop 2."}])
    out = tmp_path / "s.arrow"
    workdir_of(out).mkdir()
    held = hold_exclusive(workdir_of(out) / ".lock", "test")  # the first ingest, still running
    try:
        second = pmem_ingest(str(stream), "--out", str(out))
    finally:
        held.release()
    assert second.returncode == 2 and f"is in use by pid {os.getpid()}" in second.stderr, second.stderr
    assert not out.exists()
    # a lock whose holder is gone is taken over (the OS released it with the process)
    code, err = ingest_here(capsys, str(stream), "--out", str(out))
    assert code == 0, err


def test_partitions_beyond_the_node_are_refused_with_the_bound(tmp_path: Path) -> None:
    stream = _write(tmp_path / "s.jsonl", [{"text": "Earlier observation: cup 1 was in countertop 2."}])
    done = pmem_ingest(str(stream), "--out", str(tmp_path / "s.arrow"), "--partitions", "1000")
    assert done.returncode == 2 and "--partitions 1000: this node can run at most" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_a_reader_that_goes_away_is_not_a_traceback(tmp_path: Path) -> None:
    """`pmem inspect STATE | head -1`: the closed pipe ends the command quietly."""
    g = ProvenanceGraph()
    for i in range(4000):
        g.apply(
            "accept",
            f"object_{i}.location",
            f"drawer {i}",
            evidence=g.observe(f"Object {i} is in drawer {i}."),
        )
    state = tmp_path / "s.arrow"
    g.save(state)
    done = subprocess.run(
        f"{sys.executable} -m pmem.cli inspect {state} | head -1; exit ${{PIPESTATUS[0]}}",
        shell=True,
        executable="/bin/bash",
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert done.returncode == 0 and len(done.stdout.splitlines()) == 1
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr


@pytest.mark.parametrize(
    ("name", "content", "needle"),
    [
        ("bad.parquet", b"PAR1" + b"\x00" * 64 + b"\x10\x00\x00\x00PAR1", "not a readable Parquet file"),
        ("text.parquet", b'{"text": "a"}\n', "not a readable Parquet file"),
        ("bad.arrow", b"ARROW1\x00\x00garbage", "not a readable Arrow IPC file or stream"),
    ],
)
def test_a_file_that_is_not_what_its_name_says_is_one_line(
    tmp_path: Path, name: str, content: bytes, needle: str
) -> None:
    stream = tmp_path / name
    stream.write_bytes(content)
    done = pmem_ingest(str(stream), "--out", str(tmp_path / "s.arrow"))
    assert done.returncode == 2 and needle in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_a_rows_valid_time_is_its_evidences_valid_time(ray_cluster, tmp_path: Path) -> None:
    """Late news (valid before the head) enters the history instead of displacing the present, in the
    partitions as in the sequential reference, and the state keeps each evidence's valid time."""
    from pmem.ingest import ingest_sequential

    rows = [
        {"text": "Earlier observation: cup 1 was in countertop 2.", "valid_time": "2026-01-05"},
        {"text": "Update: cup 1 has been moved from countertop 2 to drawer 3.", "valid_time": "2026-01-10"},
        {"text": "Earlier observation: cup 2 was in countertop 4."},
        {
            "text": "Update: cup 1 has been moved from countertop 5 to drawer 7.",
            "valid_time": "2026-01-07T10:00Z",
        },
        {"text": "Update: cup 2 has been moved from countertop 4 to drawer 1."},
    ] * 3  # three batches of 5 (batch_events 4 below): dated rows fall on both sides of batch ends
    stream = _write(tmp_path / "s.jsonl", rows)
    cfg = tmp_path / "ingest.toml"
    cfg.write_text(CONFIG.replace("batch_events = 64", "batch_events = 4"))
    outs = [tmp_path / f"p{n}.arrow" for n in (1, 2)]
    for n, out in zip((1, 2), outs, strict=True):
        ingest(stream, out, config=cfg, partitions=n, progress=False)
    reference = ingest_sequential(stream, config=cfg).to_bytes()
    assert outs[0].read_bytes() == outs[1].read_bytes() == reference
    graph = ProvenanceGraph.load(outs[0])
    assert graph.cell("cup_1.location").value == "drawer 3"  # drawer 7 is older news
    assert [graph.evidence(f"e{i}").valid_time for i in range(5)] == [
        "2026-01-05",
        "2026-01-10",
        None,
        "2026-01-07T10:00Z",
        None,
    ]
    undated = _write(tmp_path / "u.jsonl", [{"text": r["text"]} for r in rows])
    ingest(undated, tmp_path / "u.arrow", config=cfg, progress=False)
    assert ProvenanceGraph.load(tmp_path / "u.arrow").cell("cup_1.location").value == "drawer 7"


@pytest.mark.parametrize("in_memory", [None, 2])
def test_a_repeated_id_is_a_bad_row_even_after_a_resume(
    ray_cluster, tmp_path: Path, in_memory: int | None
) -> None:
    """With ``ids_in_memory = 2`` the ids read before the checkpoint are in runs on disk when the
    redelivered one comes: it is found there."""
    """Ids are an event's identity: a repeat is refused (named with the first row), or skipped and
    listed with --skip-bad, also when the first one was ingested by an earlier run of the stream."""
    import pyarrow.parquet as pq

    from pmem.ingest._stream import StreamError

    cfg = tmp_path / "ingest.toml"
    extra = "" if in_memory is None else f"\nids_in_memory = {in_memory}"
    cfg.write_text(CONFIG.replace("batch_events = 64", "batch_events = 2") + extra)
    rows = [{"text": f"Earlier observation: cup {i} was in countertop {i}.", "id": i} for i in range(5)]
    stream = _write(tmp_path / "s.jsonl", rows)
    out = tmp_path / "s.arrow"
    first = ingest(stream, out, config=cfg, progress=False, skip_bad=True)
    assert (first.events, first.rejects) == (5, 0)
    with stream.open("a") as f:  # the log grows: a redelivered event, then a new one
        f.write(
            json.dumps({"text": "Update: cup 1 has been moved from countertop 1 to drawer 9.", "id": 1})
            + "\n"
        )
        f.write(json.dumps({"text": "Earlier observation: cup 7 was in countertop 7.", "id": "7"}) + "\n")
    second = ingest(stream, out, config=cfg, progress=False, skip_bad=True)
    assert second.resumed_from == 5 and (second.events, second.rejects) == (6, 1)
    assert not (workdir_of(out) / "seen").exists()  # the check's runs are the attempt's scratch
    (reject,) = pq.read_table(workdir_of(out) / "rejects").to_pylist()
    assert reject["row"] == 6
    assert (
        reject["reason"] == "duplicate id '1' (first at line 2; ids compare as text: 1 and \"1\" are one id)"
    )
    assert ProvenanceGraph.load(out).cell("cup_1.location").value == "countertop 1"
    strict = tmp_path / "strict.arrow"
    with pytest.raises(
        StreamError, match=r"s\.jsonl: line 6: duplicate id '1' \(first at line 2; ids compare"
    ):
        ingest(stream, strict, config=cfg, progress=False)


def test_a_rows_fate_does_not_depend_on_its_neighbours(tmp_path: Path) -> None:
    """A row nested too deep for Python's JSON parser, in a field the ingest ignores, is read alike
    alone (Arrow's block reader) and beside a bad row (the per-line reader)."""
    from pmem.ingest._stream import read_stream

    deep = json.dumps({"text": "Earlier observation: cup 1 was in countertop 2."})[:-1]
    deep += ', "trace": ' + "[" * 5000 + "]" * 5000 + "}"
    verdicts = []
    for neighbours in ([], ['{"text": ""}'], ['{"no text": 1}', '{"text": "fine"}']):
        path = tmp_path / "s.jsonl"
        path.write_text("\n".join([deep, *neighbours]) + "\n")
        (batch,) = list(read_stream(path, skip_bad=True))
        verdicts.append(batch.events.to_pylist()[0])
    assert verdicts[0]["text"] == "Earlier observation: cup 1 was in countertop 2."
    assert verdicts[0] == verdicts[1] == verdicts[2]


def test_a_full_disk_is_one_line_naming_the_file(
    ray_cluster, tmp_path: Path, tmpfs, capsys: pytest.CaptureFixture[str]
) -> None:
    """SQLite's own 'database or disk is full' reaches the user (a second ROLLBACK used to hide it
    behind 'cannot rollback - no transaction is active'), in one line, and the stream is untouched."""
    rows = [{"text": f"Earlier observation: cup {i} was in countertop {i % 40}."} for i in range(3000)]
    stream = _write(tmp_path / "s.jsonl", rows)
    before = stream.read_bytes()
    full = tmpfs(300)
    code, err = ingest_here(capsys, str(stream), "--out", str(full / "s.arrow"))
    assert code == 2, err
    (line,) = err.strip().splitlines()
    assert "database or disk is full" in line or "No space left on device" in line, line
    assert str(full) in line and "Traceback" not in err
    assert stream.read_bytes() == before


def test_a_read_only_mount_is_one_line(tmp_path: Path, tmpfs) -> None:
    stream = _write(tmp_path / "s.jsonl", [{"text": "Earlier observation: cup 1 was in countertop 2."}])
    ro = tmpfs(64, read_only=True)
    done = pmem_ingest(str(stream), "--out", str(ro / "s.arrow"))
    assert done.returncode == 2 and "is not writable" in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_a_wrong_file_is_refused_before_any_cluster_starts(tmp_path: Path, monkeypatch) -> None:
    """The format is checked before Ray: a mislabelled file costs no cluster start-up (seconds)."""
    import pmem.runner
    from pmem.ingest import ingest

    def no_cluster(*args: object, **kwargs: object) -> bool:
        msg = "the ingest started Ray before it read the file"
        raise AssertionError(msg)

    monkeypatch.setattr(pmem.runner, "connect", no_cluster)
    stream = tmp_path / "text.parquet"
    stream.write_bytes(b'{"text": "a"}\n')
    with pytest.raises(ValueError, match="not a readable Parquet file"):
        ingest(stream, tmp_path / "s.arrow", progress=False)
