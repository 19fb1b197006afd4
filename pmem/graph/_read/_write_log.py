"""A graph's write log: every write in arrival order, one row per seq (:data:`WRITE_LOG_SCHEMA`), who owns
a key (:func:`partitions_of`, a stable hash), and how a log is replayed (:func:`apply_log`), split by
owner, localized to a part's numbering and kept in sealed segments. A sharded state
(:mod:`pmem.graph.shards`) is made of these; an ingest's partitions ship theirs to the driver."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pmem.graph._ops._bulk import WRITE_BATCH_SCHEMA
from pmem.graph._ops._validate import valid_instant
from pmem.graph._persist._sealing import _create_aside, _fsync_directory, _refuse, _sealed_digest, _Sealing
from pmem.graph._persist._state import (
    _mapped,
    _open_sealed,
    _sealed_schema,
)

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from pmem.graph._graph import ProvenanceGraph


#: The format named in a log segment's schema metadata.
LOG_FORMAT = "pmem-write-log"
#: A write log: a write batch's columns (an observation's ``evidence`` is the index it is observed as:
#: ``e<evidence>`` in the whole graph), the observation's ``valid_time`` (null on operations), and the
#: row's arrival ``seq`` in the whole graph (1, 2, ...: evidence and operations share it).
WRITE_LOG_SCHEMA: pa.Schema = pa.schema(
    [*WRITE_BATCH_SCHEMA, ("valid_time", pa.string()), ("seq", pa.int64())]
)
#: Rows replayed per write batch: bounds the transient of a long log's replay.
REPLAY_ROWS = 1 << 18
#: A part's union numbering (see :mod:`pmem.graph.shards`): one int64 ``union_id`` per version of the part.
UNION_VERSIONS_SCHEMA = pa.schema([("union_id", pa.int64())])
#: The format named in a union numbering's schema metadata.
UNION_VERSIONS_FORMAT = "pmem-union-versions"


# --- who owns a key ----------------------------------------------------------------------------------

#: The multiplier of the key hash (odd: invertible modulo 2**64) and its inverse.
_HASH_BASE = 0x100000001B3
_HASH_INVERSE = pow(_HASH_BASE, -1, 2**64)


def partitions_of(keys: pa.Array[Any] | pa.ChunkedArray[Any], partitions: int) -> NDArray[np.int64]:
    """The part owning each key: a stable hash of its UTF-8 bytes, the same in every process and on
    every run, computed column-wise (a stream of millions of keys is never looped over in Python).

    The hash is the polynomial ``sum(byte[i] * B**(n-1-i)) mod 2**64`` of the key's ``n`` bytes, mixed
    by splitmix64's finalizer; all keys' polynomials come from one running sum over the batch's bytes.

    >>> partitions_of(pa.array(["budget", "ship_date", "owner"]), 4).tolist()
    [2, 3, 1]
    """
    if partitions == 1:
        return np.zeros(len(keys), np.int64)
    array = pc.cast(keys, pa.large_string())
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    buffers: list[Any] = array.buffers()  # validity, offsets, data (None when every key is empty)
    offsets = np.frombuffer(buffers[1], np.int64)[array.offset : array.offset + len(array) + 1]
    raw = np.frombuffer(buffers[2], np.uint8) if buffers[2] is not None else np.zeros(0, np.uint8)
    base = int(offsets[0])
    raw = raw[base : int(offsets[-1])].astype(np.uint64)
    ends = offsets - base
    total = len(raw)
    with np.errstate(over="ignore"):  # arithmetic modulo 2**64 is the point
        # byte i weighs B**(total-1-i); a key ending at e is then sum * B**-(total-e)
        powers = np.cumprod(np.full(total + 1, _HASH_BASE, np.uint64), dtype=np.uint64)
        powers = np.concatenate(([np.uint64(1)], powers[:-1]))  # B**0 .. B**total
        inverse = np.cumprod(np.full(total + 1, _HASH_INVERSE, np.uint64), dtype=np.uint64)
        inverse = np.concatenate(([np.uint64(1)], inverse[:-1]))
        running = np.concatenate(([np.uint64(0)], np.cumsum(raw * powers[total - 1 :: -1][:total])))
        z = (running[ends[1:]] - running[ends[:-1]]) * inverse[total - ends[1:]]
        z ^= z >> np.uint64(30)
        z *= np.uint64(0xBF58476D1CE4E5B9)
        z ^= z >> np.uint64(27)
        z *= np.uint64(0x94D049BB133111EB)
        z ^= z >> np.uint64(31)
    owners: NDArray[np.int64] = (z % np.uint64(partitions)).astype(np.int64)
    return owners


def partition_of(key: str, partitions: int) -> int:
    """The part owning ``key`` (see :func:`partitions_of`).

    >>> partition_of("budget", 4)
    2
    """
    return int(partitions_of(pa.array([key], pa.string()), partitions)[0])


# --- the write log -----------------------------------------------------------------------------------


def apply_log(graph: ProvenanceGraph, log: pa.Table) -> NDArray[np.bool_]:
    """Replay write-log rows (:data:`WRITE_LOG_SCHEMA`, in order) into ``graph`` as write batches of up
    to :data:`REPLAY_ROWS` rows. Returns whether the graph applied each operation row, in order.

    A write batch has no valid-time column: the valid time of an observation that has one is given to
    its evidence number before the batch is applied (the number the batch will admit it as), which is
    what ``observe`` with that valid time leaves. Before, the log was cut at each such observation,
    observed alone: a batch or two of a few rows each per dated row (36x slower for 10% of them).

    The rows' ``seq`` is not read here (the graph numbers what it is given); :func:`load_sharded` checks
    the union's seqs before replaying it.

    >>> from pmem.graph import ProvenanceGraph
    >>> log = pa.table({"op": [None, "accept"], "text": ["the budget is $30k", None], "key": [None, "budget"],
    ...     "value": [None, "$30k"], "evidence": [0, 0], "seq": [1, 2]})
    >>> g = ProvenanceGraph()
    >>> apply_log(g, conform(log)).tolist(), g.head_value("budget")
    ([True], '$30k')
    """
    outcomes = [np.zeros(0, np.bool_)]
    batch_columns = WRITE_BATCH_SCHEMA.names
    store = graph.storage
    for start in range(0, log.num_rows, REPLAY_ROWS):
        part = log.slice(start, REPLAY_ROWS)
        valid_time = part.column("valid_time")
        if valid_time.null_count < part.num_rows:
            observed = pc.is_null(part.column("op")).to_numpy(zero_copy_only=False)
            dated = pc.is_valid(valid_time).to_numpy(zero_copy_only=False)
            # the evidence number each dated observation is admitted as, and its parsed valid time (all
            # parsed before any is given: a bad one writes nothing)
            numbers = store.evidence.count() + np.cumsum(observed)[dated & observed] - 1
            texts = valid_time.filter(pa.array(dated & observed)).to_pylist()
            parsed = [valid_instant(text, "apply_log") for text in texts]
            for number, (text, at) in zip(numbers.tolist(), parsed, strict=True):
                store.evidence.set_valid_time(number, text, at)
        outcomes.append(graph.apply_batch(part.select(batch_columns)).applied)
    return np.concatenate(outcomes)


def conform(table: pa.Table) -> pa.Table:
    """``table`` with :data:`WRITE_LOG_SCHEMA`'s columns, in order and of its types (a missing column
    is all null)."""
    n = table.num_rows
    columns = [
        table.column(f.name).cast(f.type) if f.name in table.column_names else pa.nulls(n, f.type)
        for f in WRITE_LOG_SCHEMA
    ]
    return pa.table(columns, schema=WRITE_LOG_SCHEMA)


def split_log(log: pa.Table, partitions: int) -> list[pa.Table]:
    """``log``'s rows for each part: each operation to the part owning its key, each observation to
    every part with an operation of ``log`` citing it, or, cited by none, to part ``evidence %
    partitions``. Row order is kept.

    Raises:
        ValueError: an operation cites evidence that is not observed in ``log`` (its part could not
            number it).
    """
    if partitions == 1:
        return [log]
    is_op = pc.is_valid(log.column("op")).to_numpy(zero_copy_only=False)
    evidence = log.column("evidence").to_numpy(zero_copy_only=False)  # floats with NaN where null
    ops = np.flatnonzero(is_op)
    observations = np.flatnonzero(~is_op)
    observed = evidence[observations].astype(np.int64)
    owner = np.full(log.num_rows, -1, np.int64)
    owner[ops] = partitions_of(log.column("key").take(pa.array(ops, pa.int64())), partitions)
    cited = ops[~np.isnan(evidence[ops])]
    cited_ev = evidence[cited].astype(np.int64)
    order = np.argsort(observed, kind="stable")
    at = np.searchsorted(observed, cited_ev, sorter=order)
    found = at < len(observed)
    found[found] = observed[order[at[found]]] == cited_ev[found]
    if not found.all():
        first = int(cited_ev[~found][0])
        msg = f"split_log: an operation cites evidence {first}, which this log does not observe"
        raise ValueError(msg)
    # needs[part, observation]: whether an operation of that part cites the observation
    needs = np.zeros((partitions, len(observations)), np.bool_)
    needs[owner[cited], order[at]] = True
    uncited = ~needs.any(axis=0)
    needs[observed[uncited] % partitions, np.flatnonzero(uncited)] = True
    parts = []
    for p in range(partitions):
        mine = np.zeros(log.num_rows, np.bool_)
        mine[ops[owner[ops] == p]] = True
        mine[observations[needs[p]]] = True
        parts.append(log.filter(pa.array(mine)))
    return parts


def localize(piece: pa.Table, first_evidence: int) -> pa.Table:
    """A part's log ``piece`` with evidence numbered in the part: its observations become evidence
    ``first_evidence``, ``first_evidence + 1``, ... and each operation cites its observation's number
    (every operation's evidence is observed in ``piece``: :func:`split_log` keeps them together)."""
    is_op = pc.is_valid(piece.column("op")).to_numpy(zero_copy_only=False)
    evidence = piece.column("evidence").to_numpy(zero_copy_only=False)
    observations = np.flatnonzero(~is_op)
    observed = evidence[observations].astype(np.int64)  # ascending: observations arrive in order
    local = np.full(piece.num_rows, -1, np.int64)
    local[observations] = first_evidence + np.arange(len(observations))
    cited = np.flatnonzero(is_op & ~np.isnan(evidence))
    at = np.searchsorted(observed, evidence[cited].astype(np.int64))
    if len(cited) and (at.max() >= len(observed) or (observed[at] != evidence[cited]).any()):
        msg = "localize: an operation cites evidence its piece does not observe"
        raise ValueError(msg)
    local[cited] = first_evidence + at
    column = pa.array(local, pa.int64(), mask=local < 0)
    return piece.set_column(WRITE_LOG_SCHEMA.get_field_index("evidence"), "evidence", column)


class LogSegment:
    """One segment of a part's write log being written: a sealed Arrow file of :data:`WRITE_LOG_SCHEMA`,
    written under a temporary name as rows come and renamed onto ``path`` when closed.

    >>> import tempfile
    >>> path = Path(tempfile.mkdtemp()) / "log-000000000001.arrow"
    >>> segment = LogSegment(path)
    >>> segment.write(conform(pa.table({"text": ["a note"], "evidence": [0], "seq": [1]})))
    >>> len(segment.close()), read_segment(path).num_rows
    (32, 1)
    """

    def __init__(
        self,
        path: Path,
        schema: pa.Schema = WRITE_LOG_SCHEMA,
        form: str = LOG_FORMAT,
        meta: dict[str, str] | None = None,
    ) -> None:
        self.path = path
        self._schema = schema  # another sealed file written in pieces: a union numbering, a search index
        fd, self._tmp = _create_aside(path)
        self._file = os.fdopen(fd, "w+b")
        self._sealing = _Sealing(self._file)  # the digest, taken from the bytes as they are written
        sealed = _sealed_schema(schema, {**(meta or {}), "format": form})  # meta: what the file is of
        self._writer = pa.ipc.new_file(self._sealing.sink(), sealed)
        self.rows = 0

    def write(self, rows: pa.Table) -> None:
        """Append ``rows`` (of :data:`WRITE_LOG_SCHEMA`, or the schema given)."""
        self._writer.write_table(rows.replace_schema_metadata(None).cast(self._schema))
        self.rows += rows.num_rows

    def close(self) -> str:
        """Seal, fsync and rename the segment onto its path; its digest."""
        self._writer.close()
        digest = self._sealing.seal()
        self._file.close()
        os.replace(self._tmp, self.path)
        _fsync_directory(self.path.parent)
        return digest

    def abandon(self) -> None:
        """Drop the segment unwritten (its temporary file removed)."""
        self._file.close()
        self._tmp.unlink(missing_ok=True)


def read_segment(path: Path, digest: str | None = None) -> pa.Table:
    """A log segment's rows, verified over every byte (and against ``digest``, when given).

    Raises:
        StateFileError: the segment is missing, damaged, not a write log, or not the one ``digest`` names.
    """
    return _read_sealed(path, digest, LOG_FORMAT, WRITE_LOG_SCHEMA, "a segment of a write log")


def read_union_versions(path: Path, digest: str) -> NDArray[np.int64]:
    """A part's union numbering (``union_id`` of each of its versions), verified over every byte and
    against ``digest``.

    Raises:
        StateFileError: the file is missing, damaged, not a union numbering, or not the one ``digest`` names.
    """
    table = _read_sealed(
        path, digest, UNION_VERSIONS_FORMAT, UNION_VERSIONS_SCHEMA, "a part's union numbering"
    )
    ids: NDArray[np.int64] = table.column("union_id").to_numpy()
    return ids


def _read_sealed(path: Path, digest: str | None, form: str, schema: pa.Schema, what: str) -> pa.Table:
    """A sealed file of a sharded state that is not a state's table (its ``form`` and ``schema``),
    verified over every byte and against ``digest`` (when given)."""
    data = _mapped(path)
    table = _open_sealed(data, path)
    meta = table.schema.metadata or {}
    if meta.get(b"format") != form.encode() or not table.schema.equals(schema, check_metadata=False):
        raise _refuse(path, f"not {what}")
    if digest is not None and _sealed_digest(data) != digest:
        raise _refuse(
            path, "its digest is not the one the sharded state's index lists (a file of another state?)"
        )
    return table.replace_schema_metadata(None)


def sealed_file_digest(path: Path) -> str:
    """The digest of the sealed file at ``path`` (a table file of a directory state, a log segment),
    verified over its bytes."""
    data = _mapped(path)
    _open_sealed(data, path)
    return _sealed_digest(data)
