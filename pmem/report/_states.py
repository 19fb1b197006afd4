"""What each memory kept: the saved graph states of a run, read as flat tables with Polars.

Every arm with a provenance graph saves it per history (``states/<arm>/<history>.<unit>.arrow``, the file
layout of ``docs/core.md``: one Arrow file holding each table as an Arrow IPC stream). This reads each
state's ``versions`` table with Polars alone (no graph is rebuilt, ``pmem.graph`` is not imported) and
counts, per benchmark and arm, what the memory holds at the end of its histories: versions per history,
their shares by status, the cells that keep a history and those left with an open conflict.

>>> import polars as pl, tempfile
>>> from pmem.graph import ProvenanceGraph
>>> g = ProvenanceGraph()
>>> _ = g.apply("accept", "room", "A"), g.apply("accept", "room", "B"), g.apply("contest", "room", "C")
>>> path = tempfile.mkdtemp() + "/state.arrow"
>>> g.save(path)
>>> read_state_table(path, "versions").select("value", "status").rows()
[('A', 'superseded'), ('B', 'contested'), ('C', 'alternative')]
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from pmem.report._table import Table
from pmem.rundir import GRAPH_STATE
from pmem.rundir import columns as C

if TYPE_CHECKING:
    from pmem.report._base import Metrics

#: status -> the column counting it (the statuses of docs/core.md; undone and erased together)
STATUS_COLUMNS = {
    "active": "active %",
    "contested": "contested %",
    "superseded": "superseded %",
    "contradicted": "contradicted %",
    "revoked": "revoked %",
    "alternative": "alternative %",
    "undone": "undone or erased %",
    "erased": "undone or erased %",
}


class NotAState(ValueError):
    """A file that is not a state of the flat-table schema (another format, or an older schema)."""


def read_state_table(path: str | Path, table: str) -> pl.DataFrame:
    """Table ``table`` of the state file at ``path`` (file layout), read with Polars.

    Raises:
        NotAState: the file holds no such table, or its statuses are codes (a schema before 4).
    """
    try:
        outer = pl.read_ipc(path)
    except (pl.exceptions.ComputeError, OSError) as exc:
        msg = f"{path}: not an Arrow state file ({exc})"
        raise NotAState(msg) from exc
    if outer.columns != ["table", "payload"]:
        msg = f"{path}: not a state file (columns {outer.columns})"
        raise NotAState(msg)
    payload = outer.filter(pl.col("table") == table)["payload"]
    if payload.is_empty():
        msg = f"{path}: no {table!r} table"
        raise NotAState(msg)
    frame = pl.read_ipc_stream(payload[0])
    if table == "versions" and frame.schema.get("status") not in (pl.Categorical, pl.String, pl.Enum):
        msg = f"{path}: an older schema (statuses as codes); pmem inspect or ProvenanceGraph.load read it"
        raise NotAState(msg)
    return frame


def _per_history(versions: pl.DataFrame) -> dict[str, Any]:
    status = versions["status"].cast(pl.String)
    counts = status.value_counts()
    by_status = dict(zip(counts["status"].to_list(), counts["count"].to_list(), strict=True))
    per_key = versions.group_by("key").agg(
        pl.len().alias("n"), (pl.col("status").cast(pl.String) == "contested").any().alias("open")
    )
    return {
        "versions": versions.height,
        "keys": per_key.height,
        "with_history": int((per_key["n"] > 1).sum()),
        "open_conflicts": int(per_key["open"].sum()),
        **{s: by_status.get(s, 0) for s in STATUS_COLUMNS},
    }


def state_table(m: Metrics) -> Table:
    run = m.run
    name, title, section = "state_contents", "What each memory kept (from the saved states)", "audit"
    notes = [
        "Read from each history's saved graph state (states/): its versions table, read with Polars "
        "alone. versions/history and keys/history: means over histories; the status shares are of all "
        "versions; with history: keys holding more than one version; open conflicts: keys whose head is "
        "contested at the end, per history.",
    ]
    hs = run.frame("histories")
    if hs is None or C.STATE_PATH not in run.columns("histories"):
        return Table(
            name, title, pl.DataFrame(), None, [*notes, "No histories/ with states."], section=section
        )
    hist = (
        hs.filter(pl.col(C.STATE_PATH).is_not_null() & pl.col(C.STATE_PATH).str.ends_with(GRAPH_STATE))
        .select(C.BENCHMARK, C.ARM, C.STATE_PATH)
        .collect()
    )
    rows, unread = [], []
    for benchmark, arm, rel in hist.iter_rows():
        try:
            rows.append(
                {
                    C.BENCHMARK: benchmark,
                    C.ARM: arm,
                    **_per_history(read_state_table(run.path / rel, "versions")),
                }
            )
        except NotAState as exc:
            unread.append(str(exc))
    if unread:
        notes.append(f"{len(unread)} state file(s) not read, for example {unread[0]}")
    if not rows:
        return Table(
            name, title, pl.DataFrame(), None, [*notes, "No graph state in this run."], section=section
        )
    per = pl.DataFrame(rows)
    shares = [
        (
            pl.sum_horizontal([pl.col(s).sum() for s, c in STATUS_COLUMNS.items() if c == column])
            * 100
            / pl.col("versions").sum()
        )
        .round(1)
        .alias(column)
        for column in dict.fromkeys(STATUS_COLUMNS.values())
    ]
    data = (
        per.group_by(C.BENCHMARK, C.ARM)
        .agg(
            pl.len().alias("histories"),
            (pl.col("versions").mean()).round(1).alias("versions/history"),
            (pl.col("keys").mean()).round(1).alias("keys/history"),
            *shares,
            (pl.col("with_history").sum() * 100 / pl.col("keys").sum()).round(1).alias("keys with history %"),
            (pl.col("open_conflicts").mean()).round(2).alias("open conflicts/history"),
        )
        .sort(C.BENCHMARK, C.ARM)
    )
    values = tuple(c for c in data.columns if c not in (C.BENCHMARK, C.ARM))
    return Table(name, title, data, None, notes, keys=(C.BENCHMARK, C.ARM), values=values, section=section)
