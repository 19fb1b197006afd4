"""Fact rows: already-extracted facts ingested with no model, column-wise; mixed with text rows, the same
bytes as the sequential reference for any partition count; bad fact rows named like any bad row."""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from streams import FACT_FIELDS, as_table, read_events, write_arrow, write_jsonl, write_parquet

import pmem.ingest._stream as stream_module
from pmem.bench.alfworld_templates import CONFLICT_REPORT, STALE_RECORD
from pmem.graph import ProvenanceGraph, apply_log, partition_of, partitions_of
from pmem.ingest import IngestSpec, StreamError, ingest, ingest_sequential, read_stream
from pmem.ingest._checkpoint import CHECKPOINT_SHARE, Checkpointer
from pmem.ingest._driver import _Ingest
from pmem.ingest._merge import batch_log, fact_log, fact_row_operations
from pmem.ingest._stream import Position
from pmem.ingest._synthetic import _FC, _OBJECTS, fact_table, synthetic_rows
from pmem.ingest._workdir import Workdir, workdir_of
from pmem.ingest._worker import (
    FactRun,
    IngestWorker,
    RoutedFact,
    extraction_rows,
    partition_facts,
)

CONFIG = (
    '[models.agent]\nbackend = "heuristic"\n[models.embedder]\nbackend = "hashing"\n'
    "[ingest]\nbatch_events = 32\ncheckpoint_every = 64\nfact_batch_events = 256\n"
)
#: Fact rows of every op, with and without their own text, time and valid time.
FACTS: list[dict[str, Any]] = [
    {"key": "mug_1.location", "value": "shelf 2"},
    {"key": "mug_1.location", "op": "contest", "value": "sink 3", "source": "cam"},
    {"key": "mug_1.location", "op": "resolve", "value": "sink 3", "text": "Confirmed: the mug is in sink 3."},
    {"key": "mug_1.location", "op": "revoke"},
    {"text": "Earlier observation: apple 1 was in drawer 2."},
    {"key": "budget", "value": "30k", "time": "2026-01-02", "valid_time": "2025-12-01", "id": "f6"},
    {"key": "budget", "op": "reject", "value": "30k"},
    {"key": "budget", "op": "noop"},
]
EVIDENCE = [
    "mug_1.location: shelf 2",
    "contest mug_1.location: sink 3",
    "Confirmed: the mug is in sink 3.",
    "revoke mug_1.location",
    "Earlier observation: apple 1 was in drawer 2.",
    "budget: 30k",
    "reject budget: 30k",
    "noop budget",
]


def write_columnar(path: Path, table: pa.Table) -> Path:
    """``table`` as Parquet or an Arrow file (by ``path``'s suffix), three rows a batch."""
    if path.suffix == ".parquet":
        return write_parquet(path, table, row_group_size=3)
    return write_arrow(path, table, chunk=3)


# ---------------------------------------------------------------------------------------- the stream


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet", ".arrow"])
def test_fact_rows_read_alike_in_every_format_with_their_evidence_text(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"s{suffix}"
    if suffix == ".jsonl":
        write_jsonl(path, FACTS)
    else:
        write_columnar(path, as_table(FACTS, FACT_FIELDS))
    events = read_events(path)
    assert [e["text"] for e in events] == EVIDENCE
    assert [(e["key"], e["op"], e["value"]) for e in events] == [
        (f.get("key"), f.get("op", "accept") if "key" in f else None, f.get("value")) for f in FACTS
    ]
    assert [(e["source"], e["time"], e["valid_time"], e["id"]) for e in events][5] == (
        "user",
        "2026-01-02",
        "2025-12-01",
        "f6",
    )
    assert events[1]["source"] == "cam"


def test_a_values_number_keeps_its_spelling(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_text(
        '{"key": "age", "value": 42}\n{"key": "pi", "value": -1.5e3}\n{"key": "s", "value": "7"}\n'
    )
    assert [(e["value"], e["text"]) for e in read_events(path)] == [
        ("42", "age: 42"),
        ("-1.5e3", "pi: -1.5e3"),
        ("7", "s: 7"),
    ]
    table = pa.table({"key": ["a", "b"], "value": pa.array([42, None], pa.int64())})
    table = table.append_column("op", pa.array([None, "revoke"]))
    assert [e["value"] for e in read_events(write_columnar(tmp_path / "s.parquet", table))] == ["42", None]


BAD_FACT_LINES: list[tuple[bytes, str]] = [
    (
        b'{"key": "k", "op": "upsert", "value": "v"}',
        "field 'op' must be one of accept, contest, reject, revoke, resolve, noop, got 'upsert'",
    ),
    (b'{"key": "k", "op": 1}', "field 'op' must be a string, got number"),
    (b'{"value": "v"}', "field 'key' is missing: 'op' and 'value' are the fields of a fact row"),
    (b'{"op": "revoke", "text": "t"}', "field 'key' is missing: 'op' and 'value'"),
    (b'{"key": "k"}', "field 'value' is missing: op 'accept' needs a value"),
    (b'{"key": "k", "op": "contest"}', "field 'value' is missing: op 'contest' needs a value"),
    (b'{"key": "k", "op": "resolve", "value": null}', "field 'value' is missing: op 'resolve' needs a value"),
    (b'{"key": "k", "value": true}', "field 'value' must be a string or a number, got boolean"),
    (b'{"key": "", "value": "v"}', "field 'key' must be a non-empty string"),
    (b'{"key": "   ", "value": "v"}', "field 'key' must not be blank (only whitespace)"),
    (b'{"key": "a\\nb", "value": "v"}', "field 'key' must not contain control characters"),
    (b'{"key": "a\\u2028b", "value": "v"}', "field 'key' must not contain control characters"),
    (b'{"key": "k\\udc80", "value": "v"}', "field 'key' contains a lone surrogate"),
    (b'{"key": 7, "value": "v"}', "field 'key' must be a string, got number"),
    (b'{"key": "k", "value": "v", "text": " "}', "field 'text' is empty (only whitespace)"),
]


@pytest.mark.parametrize(("line", "reason"), BAD_FACT_LINES, ids=[r for _, r in BAD_FACT_LINES])
def test_a_bad_fact_row_names_the_file_the_line_and_the_field(
    tmp_path: Path, line: bytes, reason: str
) -> None:
    path = tmp_path / "s.jsonl"
    good = b'{"key": "k", "value": "v"}'
    path.write_bytes(good + b"\n" + line + b"\n" + good + b"\n")
    with pytest.raises(StreamError) as caught:
        list(read_stream(path))
    assert str(caught.value).startswith(f"{path}: line 2: {reason}")
    (batch,) = read_stream(path, skip_bad=True)
    assert batch.events.column("row").to_pylist() == [1, 3]
    (reject,) = batch.rejects.to_pylist()
    assert reject["row"] == 2 and reject["reason"].startswith(reason)


COLUMNAR_BAD_FACTS: list[tuple[str, dict[str, pa.Array], str]] = [
    ("unknown op", {"key": pa.array(["k"] * 3), "op": pa.array([None, "upsert", None]), "value": pa.array(["v"] * 3)},
     "field 'op' must be one of accept, contest, reject, revoke, resolve, noop, got 'upsert'"),
    ("value without key", {"key": pa.array(["k", None, "k"]), "value": pa.array(["v"] * 3)},
     "field 'key' is missing"),
    ("accept without value", {"key": pa.array(["k"] * 3), "value": pa.array(["v", None, "v"])},
     "field 'value' is missing: op 'accept' needs a value"),
    ("refused key", {"key": pa.array(["k", "a\tb", "k"]), "value": pa.array(["v"] * 3)},
     "field 'key' must not contain control characters or line separators (found '\\t')"),
    ("empty key", {"key": pa.array(["k", "", "k"]), "value": pa.array(["v"] * 3)},
     "field 'key' must be a non-empty string"),
    ("blank key", {"key": pa.array(["k", "   ", "k"]), "value": pa.array(["v"] * 3)},
     "field 'key' must not be blank (only whitespace)"),
    ("bool value", {"key": pa.array(["k"] * 3), "value": pa.array([True, False, True])},
     "row 1: field 'value' must be a string or a number, got bool"),
    ("int key", {"key": pa.array([1, 2, 3]), "value": pa.array(["v"] * 3)},
     "row 1: field 'key' must be a string, got int64"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("columns", "reason"), [c[1:] for c in COLUMNAR_BAD_FACTS], ids=[c[0] for c in COLUMNAR_BAD_FACTS]
)
@pytest.mark.parametrize("suffix", [".parquet", ".arrow"])
def test_a_bad_columnar_fact_row_names_the_row_and_the_field(
    tmp_path: Path, suffix: str, columns: dict[str, pa.Array], reason: str
) -> None:
    path = write_columnar(tmp_path / f"s{suffix}", pa.table(columns))
    with pytest.raises(StreamError) as caught:
        list(read_stream(path))
    bad_rows = [1, 2, 3] if reason.startswith("row 1:") else [2]
    assert str(caught.value).startswith(f"{path}: row {bad_rows[0]}: {reason.removeprefix('row 1: ')}")
    (batch,) = read_stream(path, skip_bad=True)
    assert [r["row"] for r in batch.rejects.to_pylist()] == bad_rows


def test_the_fast_path_and_the_per_line_path_agree_on_fact_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rnd = random.Random(4)
    good = [json.dumps(f).encode() for f in FACTS] + [b'{"key": "n", "value": 3.25, "op": "contest"}']
    data = b"\n".join(rnd.choice(good + [line for line, _ in BAD_FACT_LINES]) for _ in range(500)) + b"\n"
    path = tmp_path / "s.jsonl"
    path.write_bytes(data)

    def read() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        batches = list(read_stream(path, batch_rows=40, skip_bad=True))
        return [e for b in batches for e in b.events.to_pylist()], [
            r for b in batches for r in b.rejects.to_pylist()
        ]

    fast = read()
    monkeypatch.setattr(stream_module, "_fast_block", lambda *args: None)
    assert read() == fast
    assert len(fast[0]) > 100 and len(fast[1]) > 100


def test_clean_fact_blocks_take_the_fast_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_jsonl(tmp_path / "s.jsonl", FACTS)

    def no_line_parsing(line: bytes, last: bool) -> None:
        raise AssertionError("a clean block was parsed line by line")

    monkeypatch.setattr(stream_module, "_parse_line", no_line_parsing)
    assert [e["text"] for e in read_events(path, batch_rows=3)] == EVIDENCE


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_batches_of_fact_rows_grow_and_a_text_row_starts_them_again(tmp_path: Path, suffix: str) -> None:
    rows = [{"key": f"k{i}", "value": "v"} for i in range(100)]
    rows += [{"text": "a text row"}] + [{"key": "k", "value": "v"} for _ in range(60)]
    path = tmp_path / f"s{suffix}"
    write_jsonl(path, rows) if suffix == ".jsonl" else write_columnar(path, as_table(rows, FACT_FIELDS))

    def covered(**options: Any) -> list[int]:
        ends = [0] + [b.end.row for b in read_stream(path, batch_rows=4, **options)]
        return [b - a for a, b in itertools.pairwise(ends)]

    # 100 fact rows: 4, 8, 16, 32, 32; the batch of rows 93-124 holds the text row: back to 4
    assert covered(fact_batch_rows=32) == [4, 8, 16, 32, 32, 32, 4, 8, 16, 9]
    assert covered() == [4] * 40 + [1]
    assert [e["row"] for e in read_events(path, batch_rows=4, fact_batch_rows=32)] == list(range(1, 162))


# ---------------------------------------------------------------------------------------- partitions


def test_partitions_are_a_stable_column_wise_hash_of_the_key() -> None:
    keys = pa.array([f"person_{i}.city" for i in range(6000)] + ["é", "日本.語", ""], pa.string())
    owners = partitions_of(keys, 4)
    assert min(np.bincount(owners, minlength=4)) > 1300
    # the same key in any array (sliced, chunked, large) is owned by the same partition
    assert partitions_of(keys.slice(1000), 4).tolist() == owners[1000:].tolist()
    chunked = pa.chunked_array([keys.slice(0, 10), keys.slice(10)])
    assert partitions_of(chunked, 4).tolist() == owners.tolist()
    assert partitions_of(keys.cast(pa.large_string()), 4).tolist() == owners.tolist()
    assert [partition_of(k, 4) for k in ("person_0.city", "日本.語")] == [owners[0], owners[-2]]
    assert partitions_of(keys, 1).tolist() == [0] * len(keys)


def test_each_partition_gets_the_fact_rows_of_its_keys_in_arrival_order(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "s.jsonl", FACTS)
    (batch,) = read_stream(path)
    parts = partition_facts(batch.events, 10, 3)
    got = sorted(
        (row["position"], i) for i, part in enumerate(parts) if part is not None for row in part.to_pylist()
    )
    facts = [i for i, f in enumerate(FACTS) if "key" in f]
    assert [p for p, _ in got] == [10 + i for i in facts]
    for i, part in enumerate(parts):
        if part is not None:
            rows = part.to_pylist()
            assert [r["position"] for r in rows] == sorted(r["position"] for r in rows)
            assert {partition_of(r["key"], 3) for r in rows} == {i}


# ---------------------------------------------------------------------------------------- the merge


def _loop_graph(path: Path) -> tuple[ProvenanceGraph, list[bool]]:
    graph = ProvenanceGraph()
    applied = []
    for event in read_events(path):
        evidence = graph.observe(event["text"], event["source"], event["time"], event["valid_time"])
        applied.append(graph.apply(event["op"], event["key"], event["value"], evidence=evidence).applied)
    return graph, applied


@pytest.mark.parametrize("dated", [False, True])
def test_a_batch_of_fact_rows_merges_as_observe_and_apply_per_row(tmp_path: Path, dated: bool) -> None:
    table = fact_table(3000, keys=200, seed=7)
    if dated:  # a few rows with a valid time: each is observed on its own, between write batches
        days = np.random.default_rng(1).integers(1, 28, 3000)
        valid = [f"2025-01-{d:02d}" if i % 97 == 5 else None for i, d in enumerate(days.tolist())]
        table = table.append_column("valid_time", pa.array(valid, pa.string()))
    path = write_jsonl(
        tmp_path / "s.jsonl", [{k: v for k, v in r.items() if v is not None} for r in table.to_pylist()]
    )
    expected, expected_applied = _loop_graph(path)
    graph = ProvenanceGraph()
    first = 0
    outcomes = []
    for batch in read_stream(path, batch_rows=700):  # several batches: evidence indices go on
        outcomes += apply_log(graph, fact_log(batch.events, first, graph.seq + 1)).tolist()
        first += batch.events.num_rows
    assert graph.to_bytes() == expected.to_bytes()
    assert outcomes == expected_applied and not all(outcomes)


# ---------------------------------------------------------------------------------------- mixed streams


def _key_of(k: int) -> str:
    """The key the heuristic agent extracts from synthetic_rows' sentences about key ``k``."""
    if k % 2 == 0:
        return f"{_OBJECTS[k % len(_OBJECTS)]}_{k}.location"
    template, kind = _FC[(k // 2) % len(_FC)]
    attribute = template.removeprefix("The ").split(" of ")[0].replace(" ", "_")
    return f"{kind.lower()}_{k}.{attribute}"


def mixed_rows(text_rows: int, keys: int, seed: int) -> list[dict[str, Any]]:
    """Text rows (the benchmarks' sentences) with fact rows of every op on the same keys among them."""
    rng = random.Random(seed)
    values = ("shelf 1", "drawer 2", "sink 3", "Ada Lovelace", "Grace Hopper")
    rows: list[dict[str, Any]] = []
    for i, row in enumerate(synthetic_rows(text_rows, keys=keys, seed=seed)):
        rows.append(row | {"id": f"{seed}:{row['id']}"})  # ids are unique across streams mixed here
        while rng.random() < 0.5:
            op = rng.choice(["accept"] * 4 + ["contest", "reject", "revoke", "resolve", "noop"])
            fact: dict[str, Any] = {"key": _key_of(rng.randrange(keys))}
            if op != "accept":
                fact["op"] = op
            if op in ("accept", "contest", "resolve") or rng.random() < 0.3:
                fact["value"] = rng.choice(values)
            if rng.random() < 0.2:
                fact["text"] = f"note {i}"
            if rng.random() < 0.05:
                fact["valid_time"] = f"2025-0{rng.randint(1, 9)}-01"
            rows.append(fact)
    return rows


def test_a_partition_applies_the_fact_rows_of_a_key_before_its_later_text_rows(tmp_path: Path) -> None:
    """In process, one batch: the worker's applied calls and the fact rows, merged, are the reference's."""
    rows = mixed_rows(150, keys=6, seed=3)
    path = write_jsonl(tmp_path / "s.jsonl", rows)
    spec = IngestSpec.default()
    (batch,) = read_stream(path, batch_rows=len(rows))
    worker = IngestWorker(spec)
    texts = extraction_rows(batch.events, 0)
    extracted = asyncio.run(worker.extract(texts))
    items = [
        RoutedFact(pos, row, fidx, key, value, status, key, event, text, valid_time)
        for (pos, row, text, *_), (facts, _, valid_time) in zip(texts, extracted, strict=True)
        for fidx, (key, value, status, event) in enumerate(facts)
    ]
    (facts,) = partition_facts(batch.events, 0, 1)
    applied = asyncio.run(worker.commit(1, items, facts))
    operations = sorted(applied + fact_row_operations(batch.events, 0), key=lambda a: (a[0], a[1]))
    valid_times = batch.events.column("valid_time").to_pylist()
    for (pos, *_), (_, _, valid_time) in zip(texts, extracted, strict=True):
        valid_times[pos] = valid_time
    merged = ProvenanceGraph()
    apply_log(merged, batch_log(batch.events, 0, operations, valid_times, merged.seq + 1))
    reference = ingest_sequential(path)
    # the identity registry lives on the driver, not in this bare merge: compare everything else
    assert list(merged.operations()) == list(reference.operations())
    assert merged.frontier() == reference.frontier()
    assert merged.stats()["op_revoke"] > 0 and len(facts) > 50


def test_a_mixed_stream_gives_the_reference_bytes_for_any_partition_count(
    ray_cluster, tmp_path: Path
) -> None:
    rows = mixed_rows(500, keys=60, seed=11)
    rows += [{"key": _key_of(k), "value": "drawer 9"} for k in range(60)] * 8  # a run of fact rows only
    rows += mixed_rows(120, keys=60, seed=12)
    stream = write_jsonl(tmp_path / "s.jsonl", rows)
    cfg = tmp_path / "ingest.toml"
    cfg.write_text(CONFIG)
    reference = ingest_sequential(stream, config=cfg).to_bytes()
    text_rows = sum("key" not in r for r in rows)
    fact_rows = len(rows) - text_rows
    for partitions in (1, 3):
        out = tmp_path / f"state-{partitions}"
        report = ingest(stream, out, config=cfg, partitions=partitions, progress=False)
        assert out.read_bytes() == reference, f"--partitions {partitions} differs from the reference"
        assert (report.events, report.fact_rows) == (len(rows), fact_rows)
        assert report.facts == fact_rows + text_rows  # one template fact per text row
        assert report.calls["extract"]["calls"] == text_rows  # a fact row is extracted by nobody
    stats = ProvenanceGraph.from_bytes(reference).stats()
    assert all(stats[f"op_{op}"] > 0 for op in ("accept", "contest", "reject", "revoke", "resolve", "noop"))


def test_a_stream_of_fact_rows_makes_no_model_call_and_no_call_per_row(
    ray_cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # accepts only: apply_batch writes them column-wise (a key with other ops goes through apply())
    table = fact_table(40_000, keys=2_000, seed=5)
    stream = tmp_path / "facts.parquet"
    pq.write_table(table.filter(pc.is_null(table.column("op"))), stream)
    cfg = tmp_path / "ingest.toml"
    cfg.write_text(CONFIG.replace("fact_batch_events = 256", "fact_batch_events = 4096"))
    reference = ingest_sequential(stream, config=cfg).to_bytes()
    batches = len(list(read_stream(stream, batch_rows=32, fact_batch_rows=4096)))
    # the driver writes fact rows column-wise: one observe or apply per row would fail here
    for name in ("observe", "apply"):
        monkeypatch.setattr(ProvenanceGraph, name, _refused)
    commits: list[int] = []
    route = _Ingest._route

    async def counted(self: _Ingest, *args: Any) -> Any:
        routed = await route(self, *args)
        commits.append(len(routed.commits))
        return routed

    monkeypatch.setattr(_Ingest, "_route", counted)
    out = tmp_path / "mystate"  # any name: no suffix needed
    report = ingest(stream, out, config=cfg, partitions=2, progress=False)
    monkeypatch.undo()
    assert out.read_bytes() == reference
    assert report.calls == {} and report.fact_rows == report.facts == report.events > 30_000
    assert not list((workdir_of(out) / "requests").iterdir())
    assert report.refused == int(sum(not a for a in _loop_applied(stream)))
    # batches of thousands of rows, and not one Ray call for them: the partitions catch up only when
    # text rows come (none here)
    assert len(commits) == batches < 30 and sum(commits) == 0


def _refused(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("a fact row was written by a per-row call")


def _loop_applied(stream: Path) -> list[bool]:
    graph = ProvenanceGraph()
    return [
        graph.apply(e["op"], e["key"], e["value"], graph.observe(e["text"], e["source"], e["time"])).applied
        for e in read_events(stream)
    ]


def test_partitions_catch_up_with_runs_of_fact_rows_read_from_the_stream(ray_cluster, tmp_path: Path) -> None:
    """Runs of batches of fact rows only reach the partitions when text rows follow: each partition
    reads the run from the stream, leaving out the rows the driver refused (a repeated id too). The text
    rows after the run report a conflict on keys the run created: a contest needs the run's head."""
    objects = 24
    rows: list[dict[str, Any]] = [{"text": STALE_RECORD.format(obj="mug 1", loc="shelf 2"), "id": "t0"}]
    # a run of fact rows over several batches of fact rows only (the first batch, with the text row,
    # holds none of the apples): each apple's only version, and revokes that would leave it no head
    rows += [{"key": f"pad_{i}.value", "value": str(i)} for i in range(100)]
    rows += [{"key": f"apple_{i}.location", "value": f"drawer {i}"} for i in range(objects)]
    rows += [{"key": f"pad_{i}.value", "value": str(i + 1)} for i in range(100)]
    rows += [{"key": f"apple_{i}.location", "op": "revoke", "id": "t0"} for i in range(0, objects, 2)]
    rows.append({"key": "apple_1.location", "op": "upsert"})  # a bad row, skipped
    rows += [
        {"key": f"pad_{i}.value", "value": str(i + 2)} for i in range(300)
    ]  # the revokes' batch: facts only
    rows += [{"text": CONFLICT_REPORT.format(obj=f"apple {i}", loc="sink 9")} for i in range(objects)]
    stream = write_jsonl(tmp_path / "s.jsonl", rows)
    cfg = tmp_path / "ingest.toml"
    cfg.write_text(CONFIG)
    reference = ingest_sequential(stream, config=cfg, skip_bad=True)
    assert reference.stats()["op_contest"] == objects  # every text row's contest found the run's head
    for partitions in (1, 2):
        out = tmp_path / f"state-{partitions}.arrow"
        report = ingest(stream, out, config=cfg, partitions=partitions, skip_bad=True, progress=False)
        assert report.rejects == objects // 2 + 1
        assert out.read_bytes() == reference.to_bytes(), (
            f"--partitions {partitions} differs from the reference"
        )


def test_a_partition_catching_up_applies_only_its_keys_fact_rows(tmp_path: Path) -> None:
    table = fact_table(5000, keys=300, seed=3)
    stream = tmp_path / "facts.parquet"
    pq.write_table(table, stream)
    head = tmp_path / "head.parquet"  # the run: the first 4000 rows
    pq.write_table(table.slice(0, 4000), head)
    reference = ingest_sequential(head)
    workers = [IngestWorker(IngestSpec.default(), index=i) for i in range(3)]
    run = FactRun(str(stream), Position(), 4000, 0)
    assert sum(asyncio.run(w.catch_up(1, run, 3)) for w in workers) == 4000
    for w in workers:
        graph = w.write_path.graph
        assert set(graph) == {k for k in reference if partition_of(k, 3) == w.index}
        assert all(graph.head_value(k) == reference.head_value(k) for k in graph)


def test_a_bad_fact_row_is_one_line_and_the_fixed_stream_resumes(
    ray_cluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from pmem.cli import main

    rows = mixed_rows(100, keys=10, seed=2)
    bad = len(rows) - 20
    good = rows[bad]
    rows[bad] = {"key": "k", "op": "upsert", "value": "v"}
    stream = write_jsonl(tmp_path / "s.jsonl", rows)
    cfg = tmp_path / "ingest.toml"
    cfg.write_text(CONFIG)
    out = tmp_path / "state"
    argv = ["ingest", str(stream), "--out", str(out), "--config", str(cfg), "--no-progress"]
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.splitlines() == [
        f"pmem ingest: error: {stream}: line {bad + 1}: field 'op' must be one of accept, contest, reject, "
        "revoke, resolve, noop, got 'upsert'"
    ]
    assert not out.exists() and (workdir_of(out) / "manifest.json").is_file()
    # with --skip-bad the row is listed under rejects
    skipped = tmp_path / "skipped"
    assert (
        main(
            [
                "ingest",
                str(stream),
                "--out",
                str(skipped),
                "--config",
                str(cfg),
                "--no-progress",
                "--skip-bad",
            ]
        )
        == 0
    )
    (reject,) = pq.read_table(workdir_of(skipped) / "rejects").to_pylist()
    assert reject["row"] == bad + 1 and "field 'op'" in reject["reason"]
    assert skipped.read_bytes() == ingest_sequential(stream, config=cfg, skip_bad=True).to_bytes()
    # the fixed stream resumes from the checkpoint before the bad row
    rows[bad] = good
    write_jsonl(stream, rows)
    assert main(argv) == 0
    report = json.loads((workdir_of(out) / "report.json").read_text())
    assert report["resumed_from"] > 0 and report["attempts"] == 2
    assert out.read_bytes() == ingest_sequential(stream, config=cfg).to_bytes()


def _graph_of(arrivals: int) -> ProvenanceGraph:
    graph = ProvenanceGraph()
    for i in range(arrivals):
        graph.observe(f"note {i}")
    return graph


def _clocked_checkpointer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layout: int | None
) -> tuple[Checkpointer, list[float]]:
    """A checkpointer of a new work folder, and the clock it reads (``time.monotonic``, set by the test)."""
    work = Workdir(workdir_of(tmp_path / "state"))
    work.create()
    stream = tmp_path / "s.jsonl"
    stream.write_text('{"text": "a"}\n')
    clock = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    return Checkpointer(work, stream, identity="spec", layout=layout), clock


def test_a_checkpoint_waits_while_writing_it_would_dominate_the_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    points, clock = _clocked_checkpointer(tmp_path, monkeypatch, layout=None)
    small, large = _graph_of(1000), _graph_of(10_000)
    assert points.affordable(small)  # none written yet
    points.save(small, events=1000, since=999.0)  # a checkpoint of one second just ended
    assert not points.affordable(small)
    clock[0] = 1000.0 + 1.5 / CHECKPOINT_SHARE
    assert points.affordable(small)
    # the graph has grown tenfold since: so has the checkpoint's cost, and the time it needs behind it
    assert not points.affordable(large)
    clock[0] = 1000.0 + 10.5 / CHECKPOINT_SHARE
    assert points.affordable(large)


def test_a_driver_that_holds_no_graph_checkpoints_at_its_last_cost_however_long_the_stream(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sharded ingest's driver checkpoints its registry (and seals the parts' logs): the cost does not
    grow with the events. Before, it was predicted in proportion to them, and a 30M-fact ingest wrote
    no checkpoint between its first and its end (a kill lost the whole run)."""
    points, clock = _clocked_checkpointer(tmp_path, monkeypatch, layout=2)
    registry_only = ProvenanceGraph()
    for i in range(100):
        registry_only.registry.register(f"user_{i}.city")
    points.save(registry_only, events=131_072, since=999.0)
    clock[0] = 1000.0 + 1.5 / CHECKPOINT_SHARE  # 30 s on: the stream is at millions of events now
    assert points.affordable(registry_only)
    # what it does grow with is the registry: ten times the keys, ten times the predicted cost
    for i in range(100, 1000):
        registry_only.registry.register(f"user_{i}.city")
    assert not points.affordable(registry_only)
    clock[0] = 1000.0 + 10.5 / CHECKPOINT_SHARE
    assert points.affordable(registry_only)


def test_the_state_is_the_last_checkpoint_under_a_second_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A state of gigabytes is neither copied nor stored twice; where no hard link can be made, a copy."""
    from pmem._atomic import file_sha256
    from pmem.ingest._workdir import publish_state

    checkpoint = tmp_path / "checkpoint.arrow"
    checkpoint.write_bytes(b"state bytes")
    out = tmp_path / "state"
    out.write_bytes(b"an older state")
    publish_state(checkpoint, out, file_sha256(checkpoint))
    assert out.read_bytes() == b"state bytes" and out.samefile(checkpoint)
    # the next checkpoint is a new file renamed over the name: the published state keeps its bytes
    (tmp_path / "next").write_bytes(b"newer")
    (tmp_path / "next").replace(checkpoint)
    assert out.read_bytes() == b"state bytes"

    def no_link(*args: Any) -> None:
        raise OSError("this file system has no hard links")

    monkeypatch.setattr("os.link", no_link)
    publish_state(checkpoint, out, file_sha256(checkpoint))
    assert out.read_bytes() == b"newer" and not out.samefile(checkpoint)
    with pytest.raises(ValueError, match="no longer hash to"):
        publish_state(checkpoint, out, "0" * 64)
    assert out.read_bytes() == b"newer"
