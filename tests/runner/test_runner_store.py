from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pmem.rundir import HISTORIES, HistoryRow, SchemaError
from pmem.runner._store import RunStore, write_table


def _row(uid: str, status: str = "complete", error: str | None = None) -> HistoryRow:
    return HistoryRow(
        run_id="r",
        unit_id=uid,
        benchmark="b",
        subset="s",
        history_id=uid,
        arm="a",
        model="m",
        status=status,
        error=error,
        attempt=0,
        n_events=1,
        n_questions=1,
        L=None,
        d=None,
        length=None,
        params="{}",
    )


def _stage(store: RunStore, token: str, batch: str, uids: list[str]):
    st = store.stage(token, batch)
    write_table(st.path_for(f"histories/part-{batch}.parquet"), [_row(u) for u in uids], "histories")
    st.units.extend(uids)
    st.drop.extend(f"histories/failed-{u}.parquet" for u in uids)
    return st


def test_commit_publishes_and_records(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "run")
    store.ensure()
    st = _stage(store, "tok", "b1", ["u1", "u2"])
    assert not (store.root / "histories" / "part-b1.parquet").exists()  # invisible until committed
    store.commit(st)
    assert store.completed() == {"u1", "u2"}
    assert pq.read_table(store.root / "histories" / "part-b1.parquet").num_rows == 2
    assert not (store.root / "_staging" / "tok" / "b1").exists()


def test_recover_discards_uncommitted_and_rolls_committed_forward(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "run")
    store.ensure()
    _stage(store, "dead", "b1", ["u1"])  # crashed before its commit record
    st2 = _stage(store, "dead", "b2", ["u2"])
    # crashed after the commit record but before the rename: write the record by hand the same way
    record = {
        "batch": "b2",
        "staging": str(st2.root.relative_to(store.root)),
        "units": ["u2"],
        "moves": st2.moves,
        "drop": st2.drop,
        "time": 0,
    }
    (store.root / "_commits" / "b2.json").write_text(json.dumps(record))
    done = store.recover("dead")
    assert done == {"u2"}
    assert store.completed() == {"u2"}
    assert (store.root / "histories" / "part-b2.parquet").exists()
    assert not (store.root / "histories" / "part-b1.parquet").exists()
    assert not (store.root / "_staging" / "dead").exists()


def test_failure_row_replaced_then_dropped_by_success(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "run")
    store.ensure()
    store.write_failure("u1", _row("u1", "failed", "first"))
    store.write_failure("u1", _row("u1", "failed", "second"))
    assert store.failed() == {"u1"}
    assert pq.read_table(store.root / "histories" / "failed-u1.parquet").column("error").to_pylist() == [
        "second"
    ]
    store.commit(_stage(store, "tok", "b1", ["u1"]))
    assert store.failed() == set()
    rows = pq.read_table(store.root / "histories").to_pylist()
    assert [(r["unit_id"], r["status"]) for r in rows] == [("u1", "complete")]


def test_record_whose_files_vanished_is_dropped(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "run")
    store.ensure()
    store.commit(_stage(store, "tok", "b1", ["u1"]))
    store.commit(_stage(store, "tok", "b2", ["u2"]))
    (store.root / "histories" / "part-b1.parquet").unlink()  # as after a power loss
    store.recover()
    assert store.completed() == {"u2"}  # u1 will run again; nothing half-recorded remains
    assert not (store.root / "_commits" / "b1.json").exists()


def test_write_table_refuses_rows_off_the_contract(tmp_path: Path) -> None:
    """The writer names the dataset and the column, and writes nothing (from_pylist used to drop the key)."""
    row = dataclasses.asdict(_row("u1"))
    with pytest.raises(SchemaError, match=r"histories: row 0 has unknown column\(s\) 'satus'"):
        write_table(tmp_path / "h.parquet", [{**row, "satus": "complete"}], "histories")
    del row["status"]
    with pytest.raises(SchemaError, match=r"histories: row 0 lacks required column\(s\) 'status'"):
        write_table(tmp_path / "h.parquet", [row], "histories")
    assert not (tmp_path / "h.parquet").exists()
    n = write_table(tmp_path / "h.parquet", [_row("u1")], "histories")
    assert n == 1 and pq.read_schema(tmp_path / "h.parquet").equals(HISTORIES.schema, check_metadata=False)
