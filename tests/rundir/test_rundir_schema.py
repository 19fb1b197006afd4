"""The run directory contract: one typed definition per dataset, and a writer that refuses rows off it."""

from __future__ import annotations

import ast
import dataclasses
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from pmem import rundir
from pmem.graph import OPS
from pmem.rundir import (
    DATASETS,
    HISTORIES,
    REQUESTS,
    RESULTS,
    WRITES,
    HistoryRow,
    ParamColumns,
    ResultRow,
    RowKeys,
    SchemaError,
    WriteRow,
)
from pmem.rundir import columns as C

#: DESIGN.md, "Run directory contract": the columns each dataset includes at least (with their types
#: where DESIGN.md gives one). Written out here on purpose: the schema must not drift from the document.
DESIGN = {
    "results": {
        "run_id": None,
        "benchmark": None,
        "subset": None,
        "history_id": None,
        "arm": None,
        "model": None,
        "question_id": None,
        "question_type": None,
        "question": None,
        "prediction": None,
        "gold": None,
        "correct": pa.bool_(),
        "stale": pa.bool_(),
        "read_tokens": None,
        "read_chars": None,
        "L": None,
        "d": None,
        "length": None,
    },
    "writes": {
        "history_id": None,
        "arm": None,
        "seq": None,
        "op": None,
        "key": None,
        "value": None,
        "applied": None,
        "reason": None,
    },
    "requests": {
        "history_id": None,
        "arm": None,
        "purpose": None,
        "model": None,
        "prompt_tokens": None,
        "completion_tokens": None,
        "cached": None,
        "latency_s": None,
        "error": None,
    },
}

KEYS = RowKeys(
    run_id="r1",
    unit_id="u1",
    benchmark="alfworld-revision",
    subset="chains",
    history_id="h1",
    arm="pmem",
    model="heuristic",
)
NO_PARAMS = ParamColumns(L=None, d=None, length=None, params="{}")


def write_row(**over: Any) -> dict[str, Any]:
    row = dataclasses.asdict(
        WriteRow(**KEYS.columns(), seq=0, op="accept", key="k", value="v", applied=True, reason=None)
    )
    return {**row, **over}


def test_schemas_hold_design_columns_as_required() -> None:
    for name, cols in DESIGN.items():
        ds = DATASETS[name]
        for col, typ in cols.items():
            assert col in ds.schema.names, f"{name}: DESIGN.md's column {col} is not in the schema"
            assert col in ds.required, f"{name}: DESIGN.md's column {col} is not required of writers"
            if typ is not None:
                assert ds.schema.field(col).type == typ, (name, col)
    assert set(DATASETS) == {"results", "writes", "requests", "histories", "judgments", "calibration"}


def test_schema_is_derived_from_the_row_type() -> None:
    for ds in DATASETS.values():
        assert ds.schema.names == [f.name for f in dataclasses.fields(ds.row)]
        assert ds.columns == tuple(ds.schema.names)
    assert RESULTS.schema.field(C.GOLD_ALL).type == pa.list_(pa.string())
    assert HISTORIES.schema.field(C.WALL_S).type == pa.float64()
    assert WRITES.schema.field(C.SEQ).type == pa.int64()


def test_column_constants_name_exactly_the_datasets_columns() -> None:
    constants = {v for k, v in vars(C).items() if k.isupper() and isinstance(v, str) and k != "OPS_PREFIX"}
    columns = {c for ds in DATASETS.values() for c in ds.columns}
    per_op = {C.op_column(op) for op in OPS}
    assert columns - per_op == constants
    assert set(C.PARAM_COLUMNS) <= columns
    assert set(RowKeys.__dataclass_fields__) <= set(RESULTS.columns)
    assert set(ParamColumns.__dataclass_fields__) <= set(RESULTS.columns) & set(HISTORIES.columns)


def test_operation_columns_follow_the_graph() -> None:
    ops = [c for c in HISTORIES.columns if c.startswith(C.OPS_PREFIX)]
    assert ops == [C.op_column(op) for op in OPS]


def test_unknown_column_is_refused_by_name() -> None:
    with pytest.raises(SchemaError, match=r"^writes: row 1 has unknown column\(s\) 'valeu'"):
        WRITES.table([write_row(), write_row(valeu="x")])
    with pytest.raises(SchemaError, match=r"results: row 0 has unknown column\(s\) 'gold_in_active_cell'"):
        rundir.to_table("results", [{**dataclasses.asdict(result_row()), "gold_in_active_cell": True}])
    # the typed constructor refuses it too, before any writer sees it
    with pytest.raises(TypeError, match="valeu"):
        WriteRow(**KEYS.columns(), seq=0, op="accept", key="k", value="v", applied=True, reason=None, valeu=1)


def test_missing_required_column_is_refused_by_name() -> None:
    row = write_row()
    del row["applied"], row["seq"]
    with pytest.raises(SchemaError, match=r"^writes: row 0 lacks required column\(s\) 'applied', 'seq'"):
        WRITES.table([row])
    with pytest.raises(TypeError, match="applied"):
        WriteRow(**KEYS.columns(), seq=0, op="accept", key="k", value="v", reason=None)  # type: ignore[call-arg]


def result_row(**over: Any) -> ResultRow:
    base = dict(
        **KEYS.columns(),
        question_id="q1",
        question_type="current",
        question="where?",
        prediction="x",
        gold="x",
        correct=True,
        stale=None,
        read_tokens=3,
        read_chars=12,
        **NO_PARAMS.columns(),
    )
    return ResultRow(**{**base, **over})


def test_optional_columns_are_null_and_rows_round_trip() -> None:
    t = RESULTS.table([result_row(gold_all=("x", "y"))])
    assert t.schema == RESULTS.schema
    got = t.to_pylist()[0]
    assert (
        got[C.GOLD_ALL] == ["x", "y"] and got[C.AUDIT_GOLD_IN_ACTIVE_CELL] is None and got[C.CORRECT] is True
    )
    # mapping rows may leave optional columns out; a row read back goes in again unchanged
    assert RESULTS.table(t.to_pylist()).equals(t)
    assert RESULTS.table([]).num_rows == 0 and RESULTS.table([]).schema == RESULTS.schema


def test_a_value_of_the_wrong_type_names_its_column() -> None:
    with pytest.raises(SchemaError, match=r"^results: column 'read_tokens'"):
        RESULTS.table([result_row(read_tokens="many")])


def test_a_row_of_another_dataset_is_refused() -> None:
    with pytest.raises(SchemaError, match=r"results: row 0 is a WriteRow, not a ResultRow"):
        RESULTS.table(
            [WriteRow(**KEYS.columns(), seq=0, op="accept", key="k", value="v", applied=True, reason=None)]
        )
    with pytest.raises(SchemaError, match="no run dataset 'result'"):
        rundir.to_table("result", [])


def test_conform_checks_a_column_built_table() -> None:
    cols = {c: [None] for c in HISTORIES.required} | {C.STATUS: ["complete"], C.ATTEMPT: [0]}
    t = HISTORIES.conform(pa.table(cols))
    assert t.schema == HISTORIES.schema and t.column(C.WALL_S).to_pylist() == [None]
    with pytest.raises(SchemaError, match=r"histories: unknown column\(s\) 'embedding_bytes'"):
        HISTORIES.conform(pa.table(cols | {"embedding_bytes": [1]}))
    with pytest.raises(SchemaError, match=r"histories: lacks required column\(s\) 'status'"):
        HISTORIES.conform(pa.table({k: v for k, v in cols.items() if k != C.STATUS}))


def test_request_keys_name_the_agent_model() -> None:
    cols = KEYS.request_columns()
    assert cols[C.AGENT_MODEL] == "heuristic" and C.MODEL not in cols
    assert set(cols) <= set(REQUESTS.columns)
    assert RowKeys.from_row({**KEYS.columns(), C.QUESTION_ID: "q"}) == KEYS
    h = HistoryRow(
        **KEYS.columns(),
        status="failed",
        error="boom",
        attempt=1,
        n_events=3,
        n_questions=1,
        **NO_PARAMS.columns(),
    )
    assert HISTORIES.table([h]).column(C.ERROR).to_pylist() == ["boom"]


def test_the_model_layer_log_uses_the_contract() -> None:
    from pmem.models import REQUEST_COLUMNS, RequestRecord, records_to_table, requests_schema

    assert list(REQUEST_COLUMNS) == [c for c in REQUESTS.columns if c in REQUEST_COLUMNS]
    for c in REQUEST_COLUMNS:
        assert requests_schema().field(c).type == REQUESTS.schema.field(c).type
    rec = RequestRecord("h1", "pmem", "extract", "heuristic", 12, 5, False, 0.01, None, True)
    t = records_to_table([rec], run_id="r")
    assert t.schema.field(C.RUN_ID).type == pa.string()
    with pytest.raises(SchemaError, match="runid"):
        records_to_table([rec], runid="r")


def test_import_is_light_and_layered() -> None:
    """pmem.rundir loads without pyarrow or the graph (the model layer imports it), and imports nothing
    from pmem but the graph and the shared write helpers (pmem._atomic: the commit record's writes)."""
    code = "import sys, pmem.rundir; print(sorted(m for m in ('pyarrow', 'pmem.graph') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    pkg = Path(rundir.__file__).parent
    for f in pkg.glob("*.py"):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("pmem"):
                allowed = ("pmem.rundir", "pmem.graph", "pmem._atomic")
                assert node.module.startswith(allowed), (f.name, node.module)
            elif isinstance(node, ast.Import):
                for a in node.names:
                    assert not a.name.startswith("pmem") or a.name.startswith(("pmem.rundir", "pmem.graph"))
