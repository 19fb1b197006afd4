"""The stream reader: three formats, one normalized schema; bad rows named; resumable; never read whole."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import random
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from streams import as_table, events_of, write_arrow, write_jsonl, write_parquet

import pmem.ingest._stream as stream
from pmem.ingest import _fields
from pmem.ingest._stream import (
    EVENT_SCHEMA,
    REJECT_SCHEMA,
    Position,
    StreamError,
    count_rows,
    read_stream,
)

RECORDS: list[dict[str, Any]] = [
    {
        "text": f"event number {i} ünïcode ✓",
        "source": None if i % 3 else f"src{i}",
        "time": f"2024-01-{i + 1:02d}",
    }
    | ({"valid_time": "2023-03-01"} if i % 4 == 0 else {})
    | ({"id": f"e{i}"} if i % 2 else {})
    for i in range(10)
]


def expected_events(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            "row": i + 1,
            "text": r["text"],
            "source": r.get("source") or "user",
            "time": r.get("time"),
            "valid_time": r.get("valid_time"),
            "id": r.get("id"),
            "key": None,
            "op": None,
            "value": None,
        }
        for i, r in enumerate(records)
    ]


@pytest.fixture(params=["jsonl", "parquet", "arrow-file", "arrow-stream"])
def stream_path(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    kind = request.param
    if kind == "jsonl":
        return write_jsonl(tmp_path / "s.jsonl", RECORDS)
    if kind == "parquet":
        return write_parquet(tmp_path / "s.parquet", as_table(RECORDS))
    return write_arrow(tmp_path / "s.arrow", as_table(RECORDS), stream_format=kind == "arrow-stream")


def test_every_format_gives_the_same_normalized_events(stream_path: Path) -> None:
    batches = list(read_stream(stream_path))
    assert all(b.events.schema == EVENT_SCHEMA and b.rejects.schema == REJECT_SCHEMA for b in batches)
    assert events_of(batches) == expected_events(RECORDS)
    assert batches[-1].end.row == count_rows(stream_path) == len(RECORDS)


def test_batches_cover_batch_rows_input_rows(stream_path: Path) -> None:
    batches = list(read_stream(stream_path, batch_rows=3))
    assert [b.events.num_rows for b in batches] == [3, 3, 3, 1]
    assert [b.end.row for b in batches] == [3, 6, 9, 10]
    if stream_path.suffix == ".jsonl":  # the offset is the byte just after the batch's last line
        data = stream_path.read_bytes()
        ends = [i + 1 for i, byte in enumerate(data) if byte == ord("\n")]
        assert [b.end.offset for b in batches] == [ends[2], ends[5], ends[8], len(data)]
    else:
        assert {b.end.offset for b in batches} == {0}


def test_resuming_at_any_batch_end_gives_exactly_the_rest(stream_path: Path) -> None:
    everything = expected_events(RECORDS)
    for batch in read_stream(stream_path, batch_rows=3):
        rest = events_of(list(read_stream(stream_path, start=batch.end, batch_rows=4)))
        assert rest == everything[batch.end.row :]


@pytest.mark.parametrize("kind", ["parquet", "arrow-file", "arrow-stream"])
def test_columnar_resume_at_any_row_inside_row_groups(tmp_path: Path, kind: str) -> None:
    table = as_table(RECORDS)
    if kind == "parquet":
        path = write_parquet(tmp_path / "s.parquet", table, row_group_size=3)
        assert pq.ParquetFile(path).metadata.num_row_groups == 4
    else:
        path = write_arrow(tmp_path / "s.arrow", table, chunk=3, stream_format=kind == "arrow-stream")
    for row in range(len(RECORDS) + 1):
        rest = events_of(list(read_stream(path, start=Position(row), batch_rows=2)))
        assert [e["row"] for e in rest] == list(range(row + 1, len(RECORDS) + 1))
    with pytest.raises(ValueError, match="only 10 rows"):
        list(read_stream(path, start=Position(11)))
    with pytest.raises(ValueError, match="JSONL only"):
        list(read_stream(path, start=Position(1, 5)))


def test_jsonl_resume_seeks_and_never_rereads_what_it_skips(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(b'not json at all\n{"text": 1}\n{"text": "fine"}\n')
    skipped = len(b'not json at all\n{"text": 1}\n')
    (batch,) = read_stream(path, start=Position(2, skipped))
    assert batch.events.select(["row", "text", "source", "key"]).to_pylist() == [
        {"row": 3, "text": "fine", "source": "user", "key": None}
    ]
    assert batch.end == Position(3, path.stat().st_size)
    assert list(read_stream(path, start=batch.end)) == []
    with pytest.raises(ValueError, match="not at the start of a line"):
        list(read_stream(path, start=Position(2, skipped - 3)))
    with pytest.raises(ValueError, match="only 45 bytes"):
        list(read_stream(path, start=Position(3, 1000)))


GOOD = '{"text": "good"}'
BAD_LINES: list[tuple[bytes, str]] = [
    (b'{"source": "chat"}', "field 'text' is missing"),
    (b'{"text": null}', "field 'text' is null"),
    (b'{"text": ""}', "field 'text' is empty"),
    (b'{"text": " \\t\\u3000\\u001c "}', "field 'text' is empty"),
    (b'{"text": 42}', "field 'text' must be a string, got number"),
    (b'{"text": "a", "time": [2024]}', "field 'time' must be a string or a number, got array"),
    (
        b'{"text": "a", "valid_time": true}',
        "field 'valid_time' must be an ISO 8601 date or datetime (a string",
    ),
    (
        b'{"text": "a", "valid_time": 1.5e3}',
        "field 'valid_time' must be an ISO 8601 date or datetime (a string",
    ),
    (
        b'{"text": "a", "valid_time": "2023"}',
        "field 'valid_time' must be an ISO 8601 date or datetime, got '2023'",
    ),
    (b'{"text": "a", "source": {"k": 1}}', "field 'source' must be a string, got object"),
    (b'{"text": "a", "source": "  "}', "field 'source' is empty"),
    (b'{"text": "a", "id": 1.5}', "field 'id' must be a string or an integer, got number"),
    (b'{"text": "ab\xffcd"}', "invalid UTF-8 at byte 13 of the line"),
    (b'{"text": "a\\udc80"}', "field 'text' contains a lone surrogate"),
    (b'{"text": "a", "time": "\\ud800"}', "field 'time' contains a lone surrogate"),
    (b'["text", "a"]', "not a JSON object, got array"),
    (b'"just a string"', "not a JSON object, got string"),
    (b'{"text": "a",}', "not valid JSON (Expecting property name"),
    (b'{"text": "a"} {"text": "b"}', "not valid JSON (Extra data"),
    (b'{"text": NaN}', "not valid JSON (NaN is not valid JSON"),
]


@pytest.mark.parametrize(("line", "reason"), BAD_LINES, ids=[r for _, r in BAD_LINES])
def test_a_bad_jsonl_row_names_the_file_the_line_and_the_field(
    tmp_path: Path, line: bytes, reason: str
) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(f"{GOOD}\n\n".encode() + line + f"\n{GOOD}\n".encode())
    with pytest.raises(StreamError) as caught:
        list(read_stream(path))
    assert str(caught.value).startswith(f"{path}: line 3: {reason}")
    assert (caught.value.row, caught.value.what) == (3, str(caught.value).split("line 3: ", 1)[1])

    (batch,) = read_stream(path, skip_bad=True)
    assert batch.events.column("row").to_pylist() == [1, 4]
    (reject,) = batch.rejects.to_pylist()
    assert reject["row"] == 3 and reject["reason"].startswith(reason)
    assert reject["raw"] == line.decode("utf-8", "backslashreplace")  # valid UTF-8, bad bytes shown
    assert batch.end == Position(4, path.stat().st_size)


def test_bad_rows_found_in_large_blocks_by_both_paths(tmp_path: Path) -> None:
    """The fast path must refuse a block whenever the per-line parser would refuse a row of it."""
    rnd = random.Random(7)
    lines = [json.dumps({"text": f"line {i}", "time": "t"}).encode() for i in range(2000)]
    bad_at = sorted(rnd.sample(range(2000), len(BAD_LINES)))
    for index, (line, _reason) in zip(bad_at, BAD_LINES, strict=True):
        lines[index] = line
    path = tmp_path / "s.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    batches = list(read_stream(path, batch_rows=700, skip_bad=True))
    rejects = [r for b in batches for r in b.rejects.to_pylist()]
    assert [r["row"] for r in rejects] == [i + 1 for i in bad_at]
    assert [r["reason"][:20] for r in rejects] == [reason[:20] for _, reason in BAD_LINES]
    assert sum(b.events.num_rows for b in batches) == 2000 - len(BAD_LINES)


def test_the_fast_path_and_the_per_line_path_agree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rnd = random.Random(3)
    pieces = [
        b'{"text": "plain", "source": "s", "time": "2024", "valid_time": "2023-01-02", "id": "x"}',
        b'{"text": "deep", "skipped": ' + b"[" * 5000 + b"]" * 5000 + b"}",
        b'{"text": "extra fields", "meta": {"a": [1, 2]}, "n": 3}',
        b'{"text": "numbers", "time": 1709251200, "valid_time": "2023-01-02T03:04:05Z", "id": -7}',
        b'{"text": "caf\xc3\xa9 \\u00e9 \\ud83d\\ude00", "source": null, "time": null}',
        b'\t{"text":"crlf"}\r',
        b"   ",
        b"",
        b'{"text": "t", "text": "dup"}',
    ] + [line for line, _ in BAD_LINES]
    data = b"\n".join(rnd.choice(pieces) for _ in range(600)) + b"\n"
    path = tmp_path / "s.jsonl"
    path.write_bytes(data)

    def read() -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[Position]]:
        batches = list(read_stream(path, batch_rows=50, skip_bad=True))
        return (
            events_of(batches),
            [r for b in batches for r in b.rejects.to_pylist()],
            [b.end for b in batches],
        )

    fast = read()
    monkeypatch.setattr(stream, "_fast_block", lambda *args: None)
    assert read() == fast
    assert len(fast[0]) > 100 and len(fast[1]) > 100


def test_clean_blocks_take_the_fast_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_jsonl(tmp_path / "s.jsonl", RECORDS)

    def no_line_parsing(line: bytes, last: bool) -> None:
        raise AssertionError("a clean block was parsed line by line")

    monkeypatch.setattr(stream, "_parse_line", no_line_parsing)
    assert events_of(list(read_stream(path, batch_rows=4))) == expected_events(RECORDS)


def test_jsonl_numbers_keep_their_spelling_and_strings_pass_through(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_text(
        '{"text": "a", "time": 1709251200, "valid_time": "2024-02-29", "id": 42}\n'
        '{"text": "b", "time": -1e3, "id": "0042"}\n'
    )
    events = events_of(list(read_stream(path)))
    assert [(e["time"], e["valid_time"], e["id"]) for e in events] == [
        ("1709251200", "2024-02-29", "42"),
        ("-1e3", None, "0042"),
    ]


def test_blank_lines_crlf_bom_and_an_unterminated_last_line(tmp_path: Path) -> None:
    path = tmp_path / "s.ndjson"
    path.write_bytes(b'\xef\xbb\xbf{"text": "one"}\r\n\r\n   \n\t\n{"text": "two"}\n{"text": "three"}')
    (batch,) = read_stream(path)
    assert batch.events.select(["row", "text"]).to_pylist() == [
        {"row": 1, "text": "one"},
        {"row": 5, "text": "two"},
        {"row": 6, "text": "three"},
    ]
    assert batch.end == Position(6, path.stat().st_size)
    assert count_rows(path) == 6


def test_a_truncated_last_line_is_named_as_such(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(f"{GOOD}\n{GOOD}\n".encode() + b'{"text": "cut sh')
    with pytest.raises(
        StreamError, match=r"s\.jsonl: line 3: truncated last line \(no newline and not valid JSON\)"
    ):
        list(read_stream(path))
    # the same bytes followed by more lines are plain invalid JSON
    path.write_bytes(b'{"text": "cut sh\n' + f"{GOOD}\n".encode())
    with pytest.raises(StreamError, match=r"line 1: not valid JSON \(Unterminated string"):
        list(read_stream(path))


def test_a_json_array_file_gets_a_hint(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_text('[{"text": "a"}, {"text": "b"}]\n')
    with pytest.raises(
        StreamError, match=r"line 1: not a JSON object, got array; a \.json stream must be JSON Lines"
    ):
        list(read_stream(path))


def test_batches_come_before_later_bad_data_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Streaming: a batch is yielded as soon as its lines are read; data appended afterwards is still seen."""
    monkeypatch.setattr(stream, "_CHUNK", 64)
    path = tmp_path / "s.jsonl"
    path.write_text(f"{GOOD}\n" * 40)
    batches = read_stream(path, batch_rows=5)
    first = next(batches)
    assert first.events.column("row").to_pylist() == [1, 2, 3, 4, 5]
    with path.open("a") as f:  # a reader that had slurped the file would never see this line
        f.write('{"text": []}\n')
    rows: list[int] = []
    with pytest.raises(StreamError, match="line 41: field 'text' must be a string, got array"):
        rows.extend(b.end.row for b in batches)
    assert rows == [10, 15, 20, 25, 30, 35, 40]


def test_a_first_batch_is_yielded_before_a_later_bad_row_raises(stream_path: Path) -> None:
    if stream_path.suffix == ".jsonl":
        with stream_path.open("a") as f:
            f.write('{"text": 7}\n')
    else:
        table = pa.concat_tables([as_table(RECORDS), as_table([{"text": ""}])])
        if stream_path.suffix == ".parquet":
            write_parquet(stream_path, table)
        else:
            write_arrow(stream_path, table, stream_format=stream_path.read_bytes()[:6] != b"ARROW1")
    batches = read_stream(stream_path, batch_rows=4)
    assert next(batches).end.row == 4
    assert next(batches).end.row == 8
    with pytest.raises(StreamError, match=r": (line|row) 11: field 'text' "):
        next(batches)


def columnar(tmp_path: Path, table: pa.Table, suffix: str) -> Path:
    if suffix == ".parquet":
        return write_parquet(tmp_path / "s.parquet", table)
    return write_arrow(tmp_path / f"s{suffix}", table)


@pytest.fixture(params=[".parquet", ".arrow"])
def suffix(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_columnar_types_convert_to_text(tmp_path: Path, suffix: str) -> None:
    paris = dt.timezone(dt.timedelta(hours=1))
    table = pa.table(
        {
            "text": pa.array(["a", "b", "c"]).dictionary_encode(),
            "source": pa.array(["s", None, "t"], pa.large_string()),
            "time": pa.array(
                [
                    dt.datetime(2024, 1, 2, 3, 4, 5, 123000, tzinfo=paris),
                    None,
                    dt.datetime(2024, 1, 2, tzinfo=paris),
                ],
                pa.timestamp("ms", "+01:00"),
            ),
            "valid_time": pa.array([dt.date(2023, 5, 6), None, dt.date(2023, 5, 7)]),
            "id": pa.array([1, None, -3], pa.int32()),
            "other": pa.array([[1], [2], None]),
        }
    )
    events = events_of(list(read_stream(columnar(tmp_path, table, suffix))))
    assert [(e["source"], e["time"], e["valid_time"], e["id"]) for e in events] == [
        ("s", "2024-01-02T03:04:05.123+01:00", "2023-05-06", "1"),
        ("user", None, None, None),
        ("t", "2024-01-02T00:00:00.000+01:00", "2023-05-07", "-3"),
    ]
    numbers = pa.table({"text": ["x", "y"], "time": [1709251200, 7]})
    events = events_of(list(read_stream(columnar(tmp_path, numbers, suffix))))
    assert [e["time"] for e in events] == ["1709251200", "7"]
    # a valid time is a date or datetime the core can order: a number, or text it cannot read, is refused
    for valid in (pa.array([1.5, None]), pa.array(["2023", None])):
        table = pa.table({"text": ["x", "y"], "valid_time": valid})
        batches = list(read_stream(columnar(tmp_path, table, suffix), skip_bad=True))
        assert events_of(batches) == [
            {
                "row": 2,
                "text": "y",
                "source": "user",
                "time": None,
                "valid_time": None,
                "id": None,
                "key": None,
                "op": None,
                "value": None,
            }
        ]
        (reject,) = [r for b in batches for r in b.rejects.to_pylist()]
        assert (
            reject["row"] == 1
            and "field 'valid_time' must be an ISO 8601 date or datetime" in reject["reason"]
        )


def test_naive_and_utc_timestamps(tmp_path: Path) -> None:
    table = pa.table(
        {
            "text": ["a", "b"],
            "time": pa.array([0, 1_500_000], pa.timestamp("us")),
            "valid_time": pa.array([0, 1], pa.timestamp("s", "UTC")),
        }
    )
    events = events_of(list(read_stream(columnar(tmp_path, table, ".arrow"))))  # Parquet has no seconds unit
    assert [(e["time"], e["valid_time"]) for e in events] == [
        ("1970-01-01T00:00:00.000000", "1970-01-01T00:00:00Z"),
        ("1970-01-01T00:00:01.500000", "1970-01-01T00:00:01Z"),
    ]


def invalid_utf8_strings(values: list[bytes | None]) -> pa.Array:
    binary = pa.array(values, pa.binary())
    return pa.Array.from_buffers(pa.string(), len(binary), binary.buffers())


COLUMNAR_BAD: list[tuple[str, dict[str, pa.Array], str]] = [
    ("null text", {"text": pa.array(["ok", None, "ok"])}, "field 'text' is null"),
    ("empty text", {"text": pa.array(["ok", " \n", "ok"])}, "field 'text' is empty"),
    ("int text", {"text": pa.array([1, 2, 3])}, "row 1: field 'text' must be a string, got int64"),
    (
        "list time",
        {"text": pa.array(["ok"] * 3), "time": pa.array([None, [1], None])},
        "field 'time' must be a string or a number, got list<",
    ),
    (
        "nan time",
        {"text": pa.array(["ok"] * 3), "time": pa.array([1.0, float("nan"), 2.0])},
        "field 'time' is not a finite number",
    ),
    (
        "float id",
        {"text": pa.array(["ok"] * 3), "id": pa.array([None, 1.5, None])},
        "field 'id' must be a string or an integer, got double",
    ),
    (
        "bool source",
        {"text": pa.array(["ok"] * 3), "source": pa.array([None, True, None])},
        "field 'source' must be a string, got bool",
    ),
    (
        "invalid utf-8",
        {"text": invalid_utf8_strings([b"ok", b"\xffbad", b"ok"])},
        "field 'text' is not valid UTF-8",
    ),
]


@pytest.mark.parametrize(
    ("columns", "reason"), [c[1:] for c in COLUMNAR_BAD], ids=[c[0] for c in COLUMNAR_BAD]
)
def test_a_bad_columnar_row_names_the_row_and_the_field(
    tmp_path: Path, suffix: str, columns: dict[str, pa.Array], reason: str
) -> None:
    path = columnar(tmp_path, pa.table(columns), suffix)
    with pytest.raises(StreamError) as caught:
        list(read_stream(path))
    message = str(caught.value)
    assert message.startswith(f"{path}: row ")
    assert reason in message
    bad_rows = [1, 2, 3] if "row 1:" in reason else [2]
    assert message.startswith(f"{path}: row {bad_rows[0]}: ")

    (batch,) = read_stream(path, skip_bad=True)
    rejects = batch.rejects.to_pylist()
    assert [r["row"] for r in rejects] == bad_rows
    assert all(reason.split(": ")[-1] in r["reason"] for r in rejects)
    assert all(r["raw"].startswith("{") for r in rejects)
    assert batch.events.column("row").to_pylist() == [r for r in (1, 2, 3) if r not in bad_rows]


def test_the_first_problem_in_field_order_is_the_reason(tmp_path: Path) -> None:
    table = pa.table({"text": pa.array(["", "ok"]), "source": pa.array(["", ""]), "id": pa.array([1.5, 2.5])})
    (batch,) = read_stream(columnar(tmp_path, table, ".arrow"), skip_bad=True)
    assert batch.rejects.column("reason").to_pylist() == [
        "field 'text' is empty (only whitespace)",
        "field 'source' is empty (only whitespace)",
    ]


def test_a_file_without_a_text_column_is_refused_even_with_skip_bad(tmp_path: Path, suffix: str) -> None:
    path = columnar(tmp_path, pa.table({"body": ["a"], "time": ["t"]}), suffix)
    with pytest.raises(StreamError, match=r"row 1: field 'text' is missing: the file has no 'text' column"):
        list(read_stream(path, skip_bad=True))


def test_an_unknown_suffix_lists_the_accepted_ones(tmp_path: Path) -> None:
    with pytest.raises(
        ValueError, match=r"unknown stream format '\.csv'; accepted suffixes: \.jsonl, .*\.parquet.*\.ipc"
    ):
        read_stream(tmp_path / "s.csv")
    with pytest.raises(ValueError, match=r"unknown stream format '\(no suffix\)'"):
        count_rows(tmp_path / "stream")


def test_unreadable_columnar_files_are_named(tmp_path: Path) -> None:
    for name in ("s.parquet", "s.arrow"):
        (tmp_path / name).write_bytes(b"this is not a columnar file")
        with pytest.raises(ValueError, match=f"{name}: not a readable"):
            list(read_stream(tmp_path / name))


def test_batch_rows_must_be_positive(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "s.jsonl", RECORDS)
    for bad in (0, -1, 2.5):
        with pytest.raises(ValueError, match="batch_rows must be a positive integer"):
            read_stream(path, batch_rows=bad)  # type: ignore[arg-type]


def test_count_rows_and_the_resume_check(stream_path: Path) -> None:
    from pmem.ingest._checkpoint import stream_check

    assert count_rows(stream_path) == 10
    whole = stream_check(stream_path, 0)
    assert whole["sha256"] == hashlib.sha256(stream_path.read_bytes()).hexdigest() and not whole["prefix"]
    prefix = stream_check(stream_path, 20)
    assert prefix == {
        "bytes": 20,
        "prefix": True,
        "sha256": hashlib.sha256(stream_path.read_bytes()[:20]).hexdigest(),
    }
    with stream_path.open("ab") as f:
        f.write(b"\n")
    assert stream_check(stream_path, 0) != whole  # a Parquet/Arrow file is checked whole
    assert stream_check(stream_path, 20) == prefix  # a JSONL prefix already ingested is unchanged


def test_count_rows_counts_lines_like_positions(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    for data, lines in [
        (b"", 0),
        (b"\n\n", 2),
        (b'{"text": "a"}', 1),
        (b'{"text": "a"}\n\n{"text": "b"}', 3),
    ]:
        path.write_bytes(data)
        assert count_rows(path) == lines
        ends = [batch.end.row for batch in read_stream(path)]
        assert (ends[-1] if ends else 0) == lines


def test_the_whitespace_set_is_pythons() -> None:
    python = "".join(c for c in map(chr, range(sys.maxunicode + 1)) if c.isspace())
    assert python == _fields._WHITESPACE


def test_a_number_and_its_text_are_one_id_and_the_refusal_says_why(tmp_path: Path) -> None:
    """``2`` and ``"2"`` are one event id (a row re-exported with its id typed the other way is the same
    event: telling them apart would ingest it twice), and the refusal says so; other ids keep the
    plain message."""
    path = tmp_path / "s.jsonl"
    path.write_text('{"text": "a", "id": 2}\n{"text": "b", "id": "2"}\n')
    with pytest.raises(StreamError) as caught:
        list(read_stream(path))
    assert str(caught.value) == (
        f"{path}: line 2: duplicate id '2' (first at line 1; ids compare as text: 2 and \"2\" are one id)"
    )
    path.write_text('{"text": "a", "id": "x-2"}\n{"text": "b", "id": "x-2"}\n')
    (batch,) = read_stream(path, skip_bad=True)
    (reject,) = batch.rejects.to_pylist()
    assert (reject["row"], reject["reason"]) == (2, "duplicate id 'x-2' (first at line 1)")
    path.write_text('{"text": "a", "id": 2}\n{"text": "b", "id": 3}\n')
    assert [b.events.column("id").to_pylist() for b in read_stream(path)] == [["2", "3"]]


def test_a_parquet_streams_reader_holds_what_it_reads_now_not_what_it_has_read(tmp_path: Path) -> None:
    """Reading a Parquet stream keeps the Arrow memory of a batch or two, whatever the file's length.
    Before, the file was opened with pre-buffering, whose cache kept every row group read until the end:
    a 30M-row stream's driver held the whole file's columns (374 MiB of a 368 MiB file)."""
    rows = 64 * 4096
    table = pa.table(
        {
            "key": [f"user_{i % 5000}.city" for i in range(rows)],
            "value": [f"a value that is long enough to count {i}" for i in range(rows)],
        }
    )
    stream = tmp_path / "facts.parquet"
    pq.write_table(table, stream, row_group_size=4096)  # 64 row groups
    before = pa.total_allocated_bytes()
    held = 0
    for batch in read_stream(stream, batch_rows=4096, fact_batch_rows=4096):
        held = max(held, pa.total_allocated_bytes() - before)
        del batch
    assert held < table.nbytes / 8, f"{held:,} bytes held while reading a {table.nbytes:,}-byte table"
