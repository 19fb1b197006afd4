"""A partition worker in process: per-key arrival order, batch order whatever the call order, and the
applied calls it reports replay to the graph the `pmem` arm builds."""

from __future__ import annotations

import asyncio
import sys

import pyarrow as pa
import pytest

from pmem.graph import ProvenanceGraph, apply_log, partition_of
from pmem.ingest import IngestSpec
from pmem.ingest._memory import peak_rss_mb, reset_peak_rss
from pmem.ingest._merge import batch_log
from pmem.ingest._stream import EVENT_SCHEMA
from pmem.ingest._worker import IngestWorker, PartitionGraph, RoutedFact

TEXTS = [
    "Earlier observation: apple 1 was in drawer 2.",
    "Update: apple 1 has been moved from drawer 2 to shelf 3.",
    "Report: apple 1 is in sink 4.",
    "Confirmed: apple 1 is in sink 4.",
    "Correction: the report that apple 1 was moved to sink 4 was an error.",
    "1. The chairperson of Company 7 is Ada Lovelace.",
    "2. The chairperson of Company 7 is Grace Hopper.",
]


def _items(worker: IngestWorker, texts: list[str]) -> list[tuple]:
    rows: list[tuple[int, int, str, str, str | None]] = [
        (i, i + 1, t, "user", None, None) for i, t in enumerate(texts)
    ]
    extracted = asyncio.run(worker.extract(rows))
    items = []
    for (pos, row, text, _, _, _), (facts, error, _) in zip(rows, extracted, strict=True):
        assert error is None and len(facts) == 1, (text, facts, error)
        for fidx, (key, value, status, event) in enumerate(facts):
            items.append(RoutedFact(pos, row, fidx, key, value, status, key, event, text))
    return items


def _events(texts: list[str]) -> pa.RecordBatch:
    n = len(texts)
    return pa.RecordBatch.from_pydict(
        {
            "row": list(range(1, n + 1)),
            "text": texts,
            "source": ["user"] * n,
            "time": [None] * n,
            "valid_time": [None] * n,
            "id": [None] * n,
            "key": [None] * n,
            "op": [None] * n,
            "value": [None] * n,
        },
        schema=EVENT_SCHEMA,
    )


def test_batches_commit_in_their_order_whatever_order_the_calls_arrive_in() -> None:
    spec = IngestSpec.default()
    in_order = IngestWorker(spec)
    items = _items(in_order, TEXTS)
    first, second = items[:2], items[2:]

    async def ordered() -> list:
        return [*(await in_order.commit(1, first)), *(await in_order.commit(2, second))]

    expected = asyncio.run(ordered())
    reversed_calls = IngestWorker(spec)

    async def reversed_arrival() -> list:
        later = asyncio.ensure_future(reversed_calls.commit(2, second))
        await asyncio.sleep(0.01)  # batch 2 is waiting for batch 1 before batch 1 even arrives
        assert not later.done()
        earlier = await reversed_calls.commit(1, first)
        return [*earlier, *(await later)]

    assert asyncio.run(reversed_arrival()) == expected
    # the revoke came after the resolve it undoes: only arrival order gives this head
    ops = [a[2] for a in expected]
    assert ops[:5] == ["accept", "accept", "contest", "resolve", "revoke"], ops


def test_replaying_the_applied_calls_gives_the_sequential_graph() -> None:
    spec = IngestSpec.default()
    worker = IngestWorker(spec)
    applied = asyncio.run(worker.commit(1, _items(worker, TEXTS)))
    merged = ProvenanceGraph()
    apply_log(merged, batch_log(_events(TEXTS), 0, applied, [None] * len(TEXTS), merged.seq + 1))
    from pmem.bench._types import Event

    path = spec.write_path(spec.agent.chat_model(), spec.embedder.embedder_model())
    asyncio.run(path.write([[Event(i, t)] for i, t in enumerate(TEXTS)]))
    reference = path.graph
    # the identity registry lives on the driver, not in this bare merge: compare everything else
    assert merged.stats() == reference.stats()
    assert list(merged.operations()) == list(reference.operations())
    assert merged.frontier() == reference.frontier()


def test_partition_of_is_stable_and_spreads_keys() -> None:
    # fixed values: a key lands in the same partition in every process and on every run (no hash())
    keys = ("apple_1.location", "company_7.chairperson", "mug_3.location")
    assert [partition_of(k, 4) for k in keys] == [0, 2, 1]
    assert [partition_of(f"k{i}", 1) for i in range(5)] == [0] * 5
    counts = [0] * 4
    for i in range(4000):
        counts[partition_of(f"object_{i}.location", 4)] += 1
    assert min(counts) > 800, counts


def test_drain_hands_over_the_write_log_and_the_worker_keeps_no_record_per_write() -> None:
    """A worker runs for the whole stream: what it drains, it no longer holds (its memory would grow
    with every event otherwise)."""
    worker = IngestWorker(IngestSpec.default())
    asyncio.run(worker.commit(1, _items(worker, TEXTS)))
    drained = worker.drain()
    assert len(drained["requests"]) > 0
    assert worker.write_path.writer.write_log() == [] and not worker.write_path.writer._records_of
    assert not worker.write_path._key_events  # no audit reads it in an ingest: nothing kept per event either
    asyncio.run(worker.commit(2, _items(worker, TEXTS[:2])))
    assert len(worker.write_path.writer.write_log()) == 2  # only the writes since the drain


def test_the_peak_memory_count_starts_afresh_at_a_reset() -> None:
    block = b"\x01" * (768 * 2**20)  # written, so resident
    grown = peak_rss_mb()
    del block
    if not reset_peak_rss():
        assert sys.platform != "linux", "Linux lets a process reset its own peak"
        pytest.skip("this system keeps one peak per process")
    assert grown - peak_rss_mb() > 700, (grown, peak_rss_mb())


def test_a_partition_reads_the_evidence_it_holds_and_refuses_ids_that_are_not_evidence() -> None:
    g = ProvenanceGraph()
    g.observe("the first observation")
    g.observe("the second one")
    part = PartitionGraph.from_bytes(g.to_bytes())  # a checkpoint's graph holds the driver's evidence
    assert part.evidence("e0").text == "the first observation"
    with pytest.raises(ValueError, match="unknown evidence id"):
        part.apply("accept", "k", "v", "nonsense")
