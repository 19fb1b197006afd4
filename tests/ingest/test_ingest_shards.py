"""``pmem ingest --shards``: each worker writes its keys' part; the union is the sequential state."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import polars as pl
import pyarrow as pa
import pytest
from streams import write_jsonl
from test_ingest_facts import CONFIG, _key_of, mixed_rows

from pmem import Memory
from pmem.graph import ProvenanceGraph, StateFileError, is_sharded, partition_of
from pmem.graph.shards import INDEX, LOG, part_name, read_index
from pmem.ingest import IngestSpec, ResumeError, ingest, ingest_sequential
from pmem.ingest._workdir import workdir_of
from pmem.ingest._worker import IngestWorker


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, bytes]:
    """A stream of text rows (soft identity on) and fact rows of every op, some with a valid time; its
    config; the reference state's bytes."""
    tmp = tmp_path_factory.mktemp("mixed")
    rows = mixed_rows(400, keys=50, seed=21)
    rows += [{"key": _key_of(k), "value": "drawer 9"} for k in range(50)] * 6  # a run of fact rows only
    rows += mixed_rows(100, keys=50, seed=22)
    stream = write_jsonl(tmp / "s.jsonl", rows)
    cfg = tmp / "ingest.toml"
    cfg.write_text(CONFIG)
    return stream, cfg, ingest_sequential(stream, config=cfg).to_bytes()


def test_the_union_of_the_parts_is_the_sequential_state_for_any_partition_count(
    ray_cluster, tmp_path: Path, mixed: tuple[Path, Path, bytes]
) -> None:
    stream, cfg, reference = mixed
    whole = ingest(stream, tmp_path / "whole", config=cfg, partitions=2, progress=False)
    # one part; as many parts as workers; more parts than workers (each worker writes several)
    for partitions, parts in ((1, 1), (3, 3), (2, 6)):
        out = tmp_path / f"sharded-{parts}"
        report = ingest(
            stream, out, config=cfg, partitions=partitions, progress=False, shards=True, parts=parts
        )
        assert is_sharded(out) and out.is_dir()
        assert ProvenanceGraph.load(out).to_bytes() == reference, f"{parts} parts differ"
        assert sorted(p.name for p in out.iterdir()) == sorted(
            [INDEX, "registry", *(part_name(i) for i in range(parts))]
        )
        # the report counts what the whole-graph ingest counts
        assert report.graph == whole.graph == ProvenanceGraph.from_bytes(reference).stats()
        assert (report.events, report.facts, report.fact_rows, report.refused) == (
            whole.events,
            whole.facts,
            whole.fact_rows,
            whole.refused,
        )
        assert report.refused > 0 and report.fact_rows > 300
        assert read_index(out)["rows"] == str(ProvenanceGraph.from_bytes(reference).seq)
    reference_graph = ProvenanceGraph.from_bytes(reference)
    assert reference_graph.registry.keys  # soft identity registered keys: the union carries them
    # a memory opens the sharded state and reads the same cells; it saves to a file, never over the parts
    memory = Memory.load(tmp_path / "sharded-3")
    key = next(iter(reference_graph.frontier()))
    assert memory.get(key) == reference_graph.cell(key)
    with pytest.raises(ValueError, match="sharded state"):
        memory.save()
    memory.save(tmp_path / "copy.arrow")
    assert ProvenanceGraph.load(tmp_path / "copy.arrow").frontier() == reference_graph.frontier()


def test_each_part_holds_its_keys_and_polars_reads_the_frontier_from_the_parts(
    ray_cluster, tmp_path: Path, mixed: tuple[Path, Path, bytes]
) -> None:
    stream, cfg, reference = mixed
    out = tmp_path / "state"
    ingest(stream, out, config=cfg, partitions=3, progress=False, shards=True)
    graph = ProvenanceGraph.from_bytes(reference)
    versions = pl.concat(
        [pl.read_ipc(out / part_name(i) / "versions.arrow").with_columns(part=pl.lit(i)) for i in range(3)]
    )
    # every key is in the part that owns it, and in no other
    owners = versions.select("key", "part").unique()
    assert owners.height == versions["key"].n_unique()
    assert all(partition_of(k, 3) == p for k, p in owners.iter_rows())
    # per key, the same values and statuses in the same order as the whole graph's
    for key in graph.keys():  # noqa: SIM118 (a graph's keys(), not a dict's)
        rows = versions.filter(pl.col("key") == key).sort("id")
        assert list(zip(rows["value"], rows["status"], strict=True)) == [
            (v.value, v.status) for v in graph.versions(key)
        ]
    # the frontier, with Polars alone, over every part at once
    active = (
        pl.scan_ipc(str(out / "part-*" / "versions.arrow"))
        .filter(pl.col("status").is_in(["active", "contested"]))
        .select("key", "value")
        .collect()
    )
    assert dict(active.iter_rows()) == {
        k: c.value for k, c in graph.frontier().items() if c.value is not None
    }


def test_a_sharded_ingest_stopped_by_a_bad_row_resumes_to_the_same_state(
    ray_cluster, tmp_path: Path, mixed: tuple[Path, Path, bytes]
) -> None:
    stream, cfg, reference = mixed
    rows = [json.loads(line) for line in stream.read_text().splitlines()]
    broken = tmp_path / "s.jsonl"
    bad = len(rows) - 150
    write_jsonl(broken, [*rows[:bad], {"key": "k", "op": "upsert"}, *rows[bad + 1 :]])
    out = tmp_path / "state"
    with pytest.raises(Exception, match="field 'op'"):
        ingest(broken, out, config=cfg, partitions=2, progress=False, shards=True)
    assert not out.exists()
    doc = json.loads((workdir_of(out) / "manifest.json").read_text())
    assert doc["shards"]["partitions"] == 2 and all(doc["shards"]["segments"])
    # the driver's checkpoint holds the registry, never the graph
    checkpoint = ProvenanceGraph.load(workdir_of(out) / doc["checkpoint"])
    assert checkpoint.stats()["evidence"] == 0 and checkpoint.registry.keys
    # another layout (its parts) is refused, naming it
    with pytest.raises(ResumeError, match="output layout differs"):
        ingest(broken, out, config=cfg, partitions=3, progress=False, shards=True)
    write_jsonl(broken, rows)
    # the parts are not the workers: another worker count that divides them goes on from their logs
    report = ingest(broken, out, config=cfg, partitions=1, progress=False, shards=True, parts=2)
    assert report.resumed_from > 0 and report.attempts == 2
    assert ProvenanceGraph.load(out).to_bytes() == reference
    # the refused writes of the fact rows before the stop are counted once the parts are built
    whole = ingest(stream, tmp_path / "whole.arrow", config=cfg, partitions=2, progress=False)
    assert (report.refused, report.fact_rows) == (whole.refused, whole.fact_rows)
    again = ingest(broken, out, config=cfg, partitions=2, progress=False, shards=True)
    assert again.state_sha256 == report.state_sha256  # already complete: nothing rewritten


def test_parts_are_a_multiple_of_the_workers_and_only_of_a_sharded_state(tmp_path: Path) -> None:
    stream = write_jsonl(tmp_path / "f.jsonl", [{"key": "k", "value": "v"}])
    with pytest.raises(ValueError, match="--parts 3 is not a multiple of --partitions 2"):
        ingest(stream, tmp_path / "state", partitions=2, progress=False, shards=True, parts=3)
    with pytest.raises(ValueError, match="give --shards with it"):
        ingest(stream, tmp_path / "state.arrow", progress=False, parts=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.jsonl"]


def test_relative_paths_are_the_drivers_wherever_the_workers_run(
    ray_cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mixed: tuple[Path, Path, bytes]
) -> None:
    """The workers' working directory is not the driver's on a cluster joined with --address (the README
    test saw their parts and caches written under the cluster's directory): a relative stream and
    ``--out`` are the driver's, for a sharded and a whole-graph ingest alike."""
    import shutil

    stream, cfg, reference = mixed
    # a lambda travels by value (this test module is not importable where the workers run)
    workers_cwd = Path(ray_cluster.get(ray_cluster.remote(lambda: os.getcwd()).remote()))
    assert workers_cwd != tmp_path
    shutil.copy(stream, tmp_path / "s.jsonl")
    monkeypatch.chdir(tmp_path)
    try:
        ingest(Path("s.jsonl"), Path("sharded"), config=cfg, partitions=2, progress=False, shards=True)
        ingest(Path("s.jsonl"), Path("whole.arrow"), config=cfg, partitions=2, progress=False)
    finally:  # what a worker would have written where it runs (never left in the repository)
        strays = [
            p for p in workers_cwd.iterdir() if p.name.startswith((".sharded.", "sharded.", "whole.arrow."))
        ]
        for stray in strays:
            shutil.rmtree(stray, ignore_errors=True)
    assert strays == []
    assert ProvenanceGraph.load(tmp_path / "sharded").to_bytes() == reference
    assert ProvenanceGraph.load(tmp_path / "whole.arrow").to_bytes() == reference


def _a_part_of_sixty_facts(tmp_path: Path) -> tuple[pa.Table, IngestWorker, Path]:
    """The write log of 60 fact rows over 7 keys, and an in-process worker that writes part 0 in
    ``part/``."""
    from pmem.ingest._merge import fact_log
    from pmem.ingest._stream import read_stream

    stream = write_jsonl(tmp_path / "f.jsonl", [{"key": f"k{i % 7}", "value": f"v{i}"} for i in range(60)])
    (batch,) = read_stream(stream)
    worker = IngestWorker(IngestSpec.default())
    folder = tmp_path / "part"
    worker.open_parts({0: str(folder)}, {}, resumed=False)
    return fact_log(batch.events, 0, 1), worker, folder


def test_a_part_resumes_from_the_segments_its_checkpoint_names(tmp_path: Path) -> None:
    """In process: a segment written after the last checkpoint is removed, the named ones replayed into
    the commits' graph before its first commit."""
    from pmem.graph import apply_log
    from pmem.graph.seams import split_log

    log, worker, folder = _a_part_of_sixty_facts(tmp_path)
    asyncio.run(worker.append(1, [(0, log.slice(0, 40), None)]))
    ((part, *kept),) = worker.seal()
    assert part == 0
    asyncio.run(
        worker.append(2, [(0, log.slice(40), None)])
    )  # never sealed: a kill before the next checkpoint
    worker.seal()
    assert len(list(folder.glob("*.arrow"))) == 2
    resumed = IngestWorker(IngestSpec.default())
    resumed.open_parts({0: str(folder)}, {0: [tuple(kept)]}, resumed=True)
    assert [p.name for p in folder.glob("*.arrow")] == [kept[0]]
    assert not resumed.write_path.graph.frontier()  # a stream of fact rows only never needs it
    # fact rows after the checkpoint, sealed by a later one: the commits read them from the stream
    # (catch_up), so the commits' graph is the checkpoint's segments alone
    asyncio.run(resumed.append(1, [(0, log.slice(40), None)]))
    assert len(resumed.seal()) == 1
    asyncio.run(resumed.commit(1, []))
    whole = ProvenanceGraph()
    apply_log(whole, log.slice(0, 40))
    assert resumed.write_path.graph.frontier() == whole.frontier()
    assert split_log(log, 1)[0].equals(log)


def test_a_part_applies_its_appends_in_the_order_sent_whatever_order_they_arrive_in(tmp_path: Path) -> None:
    """The worker is an async actor, whose calls Ray may run in any order (a CI run saw a later batch's
    append run first: its segment could not be replayed): the driver numbers them and they run in that
    order."""
    from pmem.graph import apply_log
    from pmem.graph.seams import read_segment

    log, worker, folder = _a_part_of_sixty_facts(tmp_path)

    async def second_arrives_first() -> None:
        second = asyncio.ensure_future(worker.append(2, [(0, log.slice(30), None)]))
        await asyncio.sleep(0)  # the second append starts, and must wait for the first
        await asyncio.gather(worker.append(1, [(0, log.slice(0, 30), None)]), second)

    asyncio.run(second_arrives_first())
    ((_, *kept),) = worker.seal()
    assert read_segment(folder / kept[0], kept[1]).column("seq").equals(log.column("seq"))
    whole = ProvenanceGraph()
    apply_log(whole, log)
    root = tmp_path / "state"
    root.mkdir()
    (built,) = worker.write_parts(str(root))
    graph = ProvenanceGraph.load(root / part_name(0))
    assert graph.frontier() == whole.frontier() and built.stats == whole.stats()
    assert all(graph.versions(k) == whole.versions(k) for k in whole.keys())  # noqa: SIM118 (a graph's)


def test_a_build_a_kill_interrupted_is_removed_by_the_next_run(ray_cluster, tmp_path: Path) -> None:
    stream = write_jsonl(tmp_path / "f.jsonl", [{"key": f"k{i % 4}", "value": f"v{i}"} for i in range(12)])
    stale = tmp_path / ".state.0123456789ab.tmp"
    (stale / "part-0").mkdir(parents=True)
    ingest(stream, tmp_path / "state", progress=False, shards=True)
    assert not stale.exists() and is_sharded(tmp_path / "state")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.jsonl", "state", "state.ingest"]


def test_shards_refuse_an_output_that_is_a_file(ray_cluster, tmp_path: Path) -> None:
    stream = write_jsonl(tmp_path / "f.jsonl", [{"key": "k", "value": "v"}])
    out = tmp_path / "state.arrow"
    out.write_bytes(b"an older state")
    with pytest.raises(ValueError, match="is a file; --shards writes a directory"):
        ingest(stream, out, progress=False, shards=True)
    assert out.read_bytes() == b"an older state"


def test_a_part_that_is_missing_or_foreign_is_refused(
    ray_cluster, tmp_path: Path, mixed: tuple[Path, Path, bytes]
) -> None:
    stream, cfg, _ = mixed
    a, b = tmp_path / "a", tmp_path / "b"
    ingest(stream, a, config=cfg, partitions=2, progress=False, shards=True)
    rows = stream.read_text().splitlines()
    other = tmp_path / "other.jsonl"
    other.write_text("\n".join(rows[:-5]) + "\n")
    ingest(other, b, config=cfg, partitions=2, progress=False, shards=True)
    segment = sorted((a / part_name(1) / LOG).glob("*.arrow"))[-1]
    foreign = sorted((b / part_name(1) / LOG).glob("*.arrow"))[-1]
    segment.unlink()
    with pytest.raises(StateFileError, match="log segments are not the ones its index lists"):
        ProvenanceGraph.load(a)
    foreign.rename(segment)  # the other state's segment under this one's name
    with pytest.raises(StateFileError, match="digest is not the one"):
        ProvenanceGraph.load(a)


def test_erasing_from_a_sharded_state_is_refused_before_anything_is_written(
    ray_cluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A write log cannot record an erasure (issue 41, item 6): the command writes nothing and names
    every file holding the statement. Before, it wrote the erased union, then exited 2 naming one
    file, the statement still in the parts' logs and evidence."""
    from pmem.cli import main

    stream = write_jsonl(
        tmp_path / "f.jsonl", [{"key": f"user_{i % 3}.city", "value": f"c{i}"} for i in range(30)]
    )
    out = tmp_path / "state"
    ingest(stream, out, partitions=2, progress=False, shards=True)
    capsys.readouterr()
    assert main(["erase", str(out), "e4", "--out", str(tmp_path / "erased.arrow")]) == 2
    err = capsys.readouterr().err
    assert "cannot record an erasure: nothing was written" in err and len(err.strip().splitlines()) == 1
    part = out / part_name(partition_of("user_1.city", 2))
    assert f"{part}/evidence.arrow" in err and f"{part}/log/" in err and ".ingest/shards/part-" in err
    assert not (tmp_path / "erased.arrow").exists()


def test_one_key_of_a_sharded_state_is_read_from_its_part_with_the_unions_ids(
    ray_cluster, tmp_path: Path
) -> None:
    from pmem.graph import StateReader, read_key_versions

    stream = write_jsonl(
        tmp_path / "f.jsonl", [{"key": f"user_{i % 5}.city", "value": f"c{i}"} for i in range(40)]
    )
    out = tmp_path / "state"
    ingest(stream, out, partitions=2, progress=False, shards=True)
    union = ProvenanceGraph.load(out)
    reader = StateReader(out)
    for key in union:
        assert read_key_versions(out, key) == union.versions(key)
        assert reader.cell(key) == union.cell(key)
    # the part alone is a state of its keys, numbered its own way
    part = out / part_name(partition_of("user_2.city", 2))
    assert [(v.value, v.status) for v in read_key_versions(part, "user_2.city")] == [
        (v.value, v.status) for v in union.versions("user_2.city")
    ]


def test_a_worker_writes_no_part_it_was_not_given(tmp_path: Path) -> None:
    from pmem.ingest._merge import fact_log
    from pmem.ingest._stream import read_stream

    stream = write_jsonl(tmp_path / "f.jsonl", [{"key": "k", "value": "v"}])
    (batch,) = read_stream(stream)
    with pytest.raises(RuntimeError, match="open_parts"):
        asyncio.run(IngestWorker(IngestSpec.default()).append(1, [(0, fact_log(batch.events, 0, 1), None)]))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.jsonl"]


def test_two_sharded_states_hold_one_union_however_their_logs_are_cut(ray_cluster, tmp_path: Path) -> None:
    """``union_difference`` compares two sharded states part by part without building either: an ingest
    stopped and resumed (its logs cut where it stopped) is the union of the one that was not; one value
    changed is found in its part's log."""
    from pmem.graph.shards import union_difference

    rows = [{"key": f"user_{i % 9}.city", "value": f"c{i % 13}"} for i in range(300)]
    stream = write_jsonl(tmp_path / "f.jsonl", rows)
    whole, resumed = tmp_path / "whole", tmp_path / "resumed"
    cfg = tmp_path / "small.toml"
    cfg.write_text("[ingest]\nbatch_events = 16\nfact_batch_events = 16\ncheckpoint_every = 16\n")
    ingest(stream, whole, config=cfg, partitions=2, progress=False, shards=True, parts=4)
    broken = write_jsonl(tmp_path / "b.jsonl", [*rows[:200], {"key": "k", "op": "upsert"}, *rows[201:]])
    with pytest.raises(Exception, match="field 'op'"):
        ingest(broken, resumed, config=cfg, partitions=2, progress=False, shards=True, parts=4)
    write_jsonl(broken, rows)
    ingest(broken, resumed, config=cfg, partitions=2, progress=False, shards=True, parts=4)
    cut = [len(list((state / part_name(0) / LOG).glob("*.arrow"))) for state in (resumed, whole)]
    assert cut[0] != cut[1], cut  # the logs are cut differently
    assert union_difference(resumed, whole) is None
    rows[150]["value"] = "elsewhere"
    other = tmp_path / "other"
    ingest(
        write_jsonl(tmp_path / "g.jsonl", rows),
        other,
        config=cfg,
        partitions=2,
        progress=False,
        shards=True,
        parts=4,
    )
    assert (
        union_difference(resumed, other)
        == f"part {partition_of(rows[150]['key'], 4)}'s log: the same number of rows, not the same rows"
    )
