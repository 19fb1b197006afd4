"""Write logs and sharded states for tests: a random log as an ingest writes one, and its sharded state
written part by part as the ingest's workers write it."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa

from pmem.graph import WRITE_LOG_SCHEMA, ProvenanceGraph, apply_log
from pmem.graph.seams import LogSegment, localize, split_log
from pmem.graph.shards import LOG, REGISTRY, part_name, write_index

OPS = ("accept", "accept", "accept", "contest", "reject", "revoke", "resolve", "noop")


def random_log(seed: int, rows: int, keys: int = 9, dated: float = 0.05) -> pa.Table:
    """A write log as an ingest writes one: each observation followed by the operations citing it
    (some citing nothing), a few observations with a valid time."""
    rng = random.Random(seed)
    columns: dict[str, list[object]] = {name: [] for name in WRITE_LOG_SCHEMA.names}
    evidence = 0
    while len(columns["seq"]) < rows:
        columns["op"].append(None)
        columns["text"].append(f"row {evidence}")
        columns["source"].append(rng.choice(["user", "crm"]))
        columns["time"].append(None)
        columns["key"].append(None)
        columns["value"].append(None)
        columns["evidence"].append(evidence)
        columns["valid_time"].append(f"2025-0{rng.randint(1, 9)}-01" if rng.random() < dated else None)
        columns["seq"].append(len(columns["seq"]) + 1)
        for _ in range(rng.choice([0, 1, 1, 2, 3])):
            op = rng.choice(OPS)
            columns["op"].append(op)
            columns["text"].append(None)
            columns["source"].append(None)
            columns["time"].append(None)
            columns["key"].append(f"key{rng.randrange(keys)}")
            columns["value"].append(rng.choice(["a", "b", "c"]) if op != "revoke" else None)
            columns["evidence"].append(evidence if rng.random() < 0.9 else None)
            columns["valid_time"].append(None)
            columns["seq"].append(len(columns["seq"]) + 1)
        evidence += 1
    return pa.table(columns, schema=WRITE_LOG_SCHEMA)


def loop_graph(log: pa.Table) -> ProvenanceGraph:
    """The graph of ``log`` written row by row: observe, apply."""
    graph = ProvenanceGraph()
    for row in log.to_pylist():
        if row["op"] is None:
            graph.observe(row["text"], row["source"], row["time"], row["valid_time"])
        else:
            evidence = None if row["evidence"] is None else f"e{row['evidence']}"
            graph.apply(row["op"], row["key"], row["value"], evidence=evidence)
    return graph


def sharded_state(
    tmp: Path,
    log: pa.Table,
    partitions: int,
    rows: int | None = None,
    registered: tuple[str, ...] = (),
    *,
    numbering: bool = True,
) -> Path:
    """A sharded state of ``log`` written as an ingest writes one (segments of a few batches each);
    its index names ``rows`` rows (default: the log's), its registry holds the keys ``registered``;
    without ``numbering``, of version 1 (no union numbering: a reader searches the parts)."""
    root = tmp / "state"
    root.mkdir()
    digests: dict[str, str] = {}
    holder = ProvenanceGraph()
    for key in registered:
        holder.registry.resolve(key)
    holder.save(root / REGISTRY, layout="directory")
    for p, piece in enumerate(split_log(log, partitions)):
        folder = root / part_name(p)
        graph = ProvenanceGraph()
        (tmp / f"log{p}").mkdir()
        segments = []
        # segments end at batch ends, where an observation starts the next row (an operation and the
        # evidence it cites are in one batch)
        starts = np.flatnonzero(pa.compute.is_null(piece.column("op")).to_numpy(zero_copy_only=False))
        last = int(starts[-1]) if len(starts) else 0  # a part may hold no row
        cuts = [0, *[int(starts[np.searchsorted(starts, c)]) for c in range(40, last, 40)]]
        for start, end in zip(cuts, [*cuts[1:], piece.num_rows], strict=True):
            batch = piece.slice(start, end - start)
            if not batch.num_rows:
                continue
            segment = LogSegment(tmp / f"log{p}" / f"log-{batch.column('seq')[0].as_py():012d}.arrow")
            segment.write(batch)
            digests[f"{part_name(p)}/{LOG}/{segment.path.name}"] = segment.close()
            segments.append(segment.path)
            apply_log(graph, localize(batch, len(graph.storage.evidence.ev_seq)))
        graph.save(folder, layout="directory")
        (folder / LOG).mkdir()
        for s in segments:
            shutil.copyfile(s, folder / LOG / s.name)
    rows = log.num_rows if rows is None else rows
    write_index(root, partitions, rows, loop_graph(log).stats(), digests, numbering=numbering)
    return root
