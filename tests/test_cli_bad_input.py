"""Every command, every kind of bad input: one line naming the file or argument, exit 2, no traceback,
and the input unchanged (issue 28). Runs in-process: every case fails before a Ray or model starts.

Kinds: a path that does not exist, a directory where a file is due, a file that is not what its name
says, an output on a read-only disk, an output on a full disk, an output that would destroy the input.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import pytest

from pmem.cli import main
from pmem.graph import ProvenanceGraph

#: A case: the command line, built from the case's folder (inputs made there) and its mounts.
Case = Callable[[Path, Callable[..., Path]], list[str]]


def _state(where: Path, n: int = 20) -> Path:
    g = ProvenanceGraph()
    for i in range(n):
        g.apply(
            "accept",
            f"object_{i}.location",
            f"drawer {i}",
            evidence=g.observe(f"Object {i} is in drawer {i}. " * 3),
        )
    g.save(where / "s.arrow")
    return where / "s.arrow"


def _garbage(where: Path, name: str) -> Path:
    (where / name).write_bytes(b"this is not what the name says\n" * 4)
    return where / name


def _stream(where: Path) -> Path:
    (where / "s.jsonl").write_text('{"text": "Earlier observation: cup 1 was in countertop 2."}\n')
    return where / "s.jsonl"


def _toml(where: Path, text: str) -> Path:
    (where / "c.toml").write_text(text + "\n")
    return where / "c.toml"


def _ingest_with_config(where: Path, config: Path) -> list[str]:
    """``pmem ingest`` of a good stream into ``where`` with the config file ``config``."""
    return ["ingest", str(_stream(where)), "--out", str(where / "o.arrow"), "--config", str(config)]


def _dir(where: Path, name: str = "adir") -> Path:
    (where / name).mkdir(exist_ok=True)
    return where / name


def _resealed(path: Path, **changed: str) -> None:
    """A sealed (name, value) table file (a directory state's metadata, a sharded state's index) with
    entries ``changed``, sealed again with a digest that checks out (as anyone can)."""
    import pyarrow as pa

    from pmem.graph._persist._state import _META_SCHEMA, _write_sealed

    table = pa.ipc.open_file(pa.memory_map(str(path))).read_all()
    meta = {
        k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items() if not k.startswith(b"file_")
    }
    entries = dict(zip(table.column("name").to_pylist(), table.column("value").to_pylist(), strict=True))
    entries.update(changed)
    path.unlink()
    _write_sealed(path, pa.table([list(entries), list(entries.values())], schema=_META_SCHEMA), meta)


def _directory_state(where: Path, **changed: str) -> Path:
    ProvenanceGraph.load(_state(where)).save(where / "state", layout="directory")
    _resealed(where / "state" / "metadata.arrow", **changed)
    return where / "state"


def _sharded(where: Path, **changed: str) -> Path:
    """A sharded state of one part (as ``pmem ingest --shards`` writes one), its index ``changed``."""
    import pyarrow as pa

    from pmem.graph import apply_log
    from pmem.graph.seams import LogSegment, conform
    from pmem.graph.shards import INDEX, LOG, REGISTRY, write_index

    log = conform(
        pa.table(
            {
                "op": [None, "accept"],
                "text": ["Object 1 is in drawer 1.", None],
                "key": [None, "object_1.location"],
                "value": [None, "drawer 1"],
                "evidence": [0, 0],
                "seq": [1, 2],
            }
        )
    )
    root = where / "sharded"
    root.mkdir()
    ProvenanceGraph().save(root / REGISTRY, layout="directory")
    part = ProvenanceGraph()
    apply_log(part, log)
    part.save(root / "part-0", layout="directory")
    (root / "part-0" / LOG).mkdir()
    segment = LogSegment(root / "part-0" / LOG / "log-000000000001.arrow")
    segment.write(log)
    digests = {f"part-0/{LOG}/{segment.path.name}": segment.close()}
    write_index(root, 1, 2, part.stats(), digests)
    _resealed(root / INDEX, **changed)
    return root


CASES: dict[str, tuple[Case, str]] = {
    # inspect
    "inspect/missing": (lambda t, m: ["inspect", str(t / "nope.arrow")], "file not found"),
    "inspect/directory-no-state": (
        lambda t, m: ["inspect", str(_dir(t))],
        "a directory without metadata.arrow",
    ),
    "inspect/not-a-state": (
        lambda t, m: ["inspect", str(_garbage(t, "g.arrow"))],
        "not a readable P-Mem state",
    ),
    "inspect/bad-as-of": (lambda t, m: ["inspect", str(_state(t)), "--as-of", "soon"], "--as-of"),
    "inspect/seq-contradicts-tables": (
        lambda t, m: ["inspect", str(_directory_state(t, seq="5999"))],
        "metadata.arrow: not a readable P-Mem state file: its metadata's seq is 5999, but its tables hold 40",
    ),
    "inspect/registry-garbage": (
        lambda t, m: ["inspect", str(_directory_state(t, registry="{}"))],
        "its metadata's registry is {}",
    ),
    "inspect/sharded-partitions-not-a-number": (
        lambda t, m: ["inspect", str(_sharded(t, partitions="two"))],
        "shards.arrow: not a readable P-Mem state file: its partitions is 'two'",
    ),
    "inspect/sharded-partitions-more": (
        lambda t, m: ["inspect", str(_sharded(t, partitions="2"))],
        "lists no digest of part-1/metadata.arrow",
    ),
    # erase
    "erase/missing": (
        lambda t, m: ["erase", str(t / "nope.arrow"), "e1", "--out", str(t / "o.arrow")],
        "file not found",
    ),
    "erase/directory": (
        lambda t, m: ["erase", str(_dir(t)), "e1", "--out", str(t / "o.arrow")],
        "is a directory",
    ),
    "erase/not-a-state": (
        lambda t, m: ["erase", str(_garbage(t, "g.arrow")), "e1", "--out", str(t / "o.arrow")],
        "not a readable P-Mem state",
    ),
    "erase/out-is-input": (
        lambda t, m: ["erase", str(_state(t)), "e1", "--out", str(t / "s.arrow")],
        "is the input state",
    ),
    "erase/out-directory": (
        lambda t, m: ["erase", str(_state(t)), "e1", "--out", str(_dir(t))],
        "is a directory",
    ),
    "erase/out-read-only": (
        lambda t, m: ["erase", str(_state(t)), "e1", "--out", str(m(64, read_only=True) / "o.arrow")],
        "Read-only file system",
    ),
    "erase/out-full-disk": (
        lambda t, m: ["erase", str(_state(t, 600)), "e1", "--out", str(m(16) / "o.arrow")],
        "No space left on device",
    ),
    "erase/state-without-out": (
        lambda t, m: ["erase", str(_state(t)), "e1"],
        "--out NEW_STATE is required to erase from a state file",
    ),
    "erase/sharded": (
        lambda t, m: ["erase", str(_sharded(t)), "e0", "--out", str(t / "o.arrow")],
        "whose write-log segments cannot record an erasure: nothing was written",
    ),
    # ingest (each refused before Ray starts)
    "ingest/missing": (
        lambda t, m: ["ingest", str(t / "nope.jsonl"), "--out", str(t / "o.arrow")],
        "not found",
    ),
    "ingest/directory": (
        lambda t, m: ["ingest", str(_dir(t)), "--out", str(t / "o.arrow")],
        "is a directory",
    ),
    "ingest/unknown-format": (
        lambda t, m: ["ingest", str(_garbage(t, "g.txt")), "--out", str(t / "o.arrow")],
        "unknown stream format",
    ),
    "ingest/not-parquet": (
        lambda t, m: ["ingest", str(_garbage(t, "g.parquet")), "--out", str(t / "o.arrow")],
        "not a readable Parquet file",
    ),
    "ingest/out-is-stream": (
        lambda t, m: ["ingest", str(_stream(t)), "--out", str(t / "s.jsonl")],
        "is the stream itself",
    ),
    "ingest/out-directory": (
        lambda t, m: ["ingest", str(_stream(t)), "--out", str(_dir(t))],
        "is a directory",
    ),
    "ingest/out-read-only": (
        lambda t, m: ["ingest", str(_stream(t)), "--out", str(m(64, read_only=True) / "o.arrow")],
        "is not writable",
    ),
    "ingest/config-missing": (
        lambda t, m: _ingest_with_config(t, t / "c.toml"),
        "config file not found",
    ),
    "ingest/config-directory": (
        lambda t, m: _ingest_with_config(t, _dir(t)),
        "is a directory",
    ),
    "ingest/config-not-toml": (
        lambda t, m: _ingest_with_config(t, _garbage(t, "c.toml")),
        "not valid TOML",
    ),
    "ingest/config-models-not-a-table": (
        lambda t, m: _ingest_with_config(t, _toml(t, 'models = "x"')),
        "[models]: must be a table",
    ),
    "ingest/config-half-models": (
        lambda t, m: _ingest_with_config(t, _toml(t, '[models.agent]\nbackend = "heuristic"')),
        "[models.embedder]: is required",
    ),
    # sweep (refused before Ray starts)
    "sweep/missing": (lambda t, m: ["sweep", str(t / "nope.toml")], "config file not found"),
    "sweep/directory": (lambda t, m: ["sweep", str(_dir(t))], "is a directory"),
    "sweep/not-toml": (lambda t, m: ["sweep", str(_garbage(t, "c.toml"))], "not valid TOML"),
    # report
    "report/missing": (lambda t, m: ["report", str(t / "nope")], "not a directory"),
    "report/a-file": (lambda t, m: ["report", str(_state(t))], "not a directory"),
    "report/not-a-run": (lambda t, m: ["report", str(_dir(t))], "no results to report"),
    # the rest
    "bench/no-data": (lambda t, m: ["bench", "verify"], "MANIFEST.json is missing"),
    "models/unknown": (lambda t, m: ["models", "prepare", str(t / "nope")], "is not a packaged model"),
    "serve/bad-port": (lambda t, m: ["serve", "--port", "99999"], "is not a TCP port"),
    "report-screenshot/missing": (
        lambda t, m: ["report-screenshot", "--html", str(t / "r.html")],
        "no such file",
    ),
}


def _digest(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not p.is_relative_to(folder / "mnt0") and ".ingest" not in str(p)
    }


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_input_is_one_line_and_exit_2(
    name: str, tmp_path: Path, tmpfs: Callable[..., Path], capsys: pytest.CaptureFixture[str], monkeypatch
) -> None:
    build, needle = CASES[name]
    monkeypatch.setenv("PMEM_DATASETS", str(tmp_path / "no-datasets"))  # bench: data that is not here
    argv = build(tmp_path, tmpfs)
    before = _digest(tmp_path)
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own refusals (a bad --port) are one line and exit 2 too
        code = exc.code
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith(("usage:", " "))]
    assert code == 2, (name, code, err)
    assert len(lines) == 1 and needle in lines[0], (name, err)
    assert "Traceback" not in err
    assert _digest(tmp_path) == before  # nothing given was changed or lost


#: Bad rows of a stream: found while the stream is read, on the session's Ray (one line, exit 2 all the
#: same; the stream and everything else given unchanged).
ROW_CASES: dict[str, tuple[str, str]] = {
    "ingest/blank-key": (
        '{"key": "a.b", "value": "v"}\n{"key": "   ", "value": "v"}\n',
        "line 2: field 'key' must not be blank (only whitespace)",
    ),
    "ingest/id-2-and-text-2": (
        '{"text": "The city of Alice is Paris.", "id": 2}\n{"text": "The city of Bob is Oslo.", "id": "2"}\n',
        "line 2: duplicate id '2' (first at line 1; ids compare as text: 2 and \"2\" are one id)",
    ),
}


@pytest.mark.parametrize("name", sorted(ROW_CASES))
def test_a_bad_row_is_one_line_and_exit_2(
    name: str, ray_cluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows, needle = ROW_CASES[name]
    stream = tmp_path / "s.jsonl"
    stream.write_text(rows)
    before = _digest(tmp_path)
    code = main(["ingest", str(stream), "--out", str(tmp_path / "o.arrow"), "--no-progress"])
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2, (name, code, err)
    assert lines == [f"pmem ingest: error: {stream}: {needle}"], (name, err)
    assert _digest(tmp_path) == before and not (tmp_path / "o.arrow").exists()
