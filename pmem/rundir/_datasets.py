"""The datasets of ``runs/<id>/`` and the one writer-side conversion from rows to an Arrow table.

``pa.Table.from_pylist(rows, schema=...)`` drops keys the schema does not know and fills absent ones with
nulls, so a misspelt column used to vanish without a word. :meth:`Dataset.table` refuses both: an unknown
column and a missing required one raise :class:`SchemaError` naming the dataset and the columns.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import MISSING, dataclass, fields, is_dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from pmem.rundir import columns as C
from pmem.rundir._rows import CalibrationRow, HistoryRow, JudgmentRow, RequestRow, ResultRow, WriteRow

if TYPE_CHECKING:
    import pyarrow as pa

R = TypeVar("R")


class SchemaError(ValueError):
    """Rows (or a table) that do not fit their dataset's schema: unknown, missing or mistyped columns."""


def _arrow_type(annotation: str) -> pa.DataType:
    import pyarrow as pa

    base = annotation.removesuffix(" | None")
    types: dict[str, pa.DataType] = {
        "str": pa.string(),
        "int": pa.int64(),
        "float": pa.float64(),
        "bool": pa.bool_(),
        "tuple[str, ...]": pa.list_(pa.string()),
    }
    if base not in types:
        msg = f"no Arrow type for a row field annotated {annotation!r} (add it to pmem.rundir._datasets)"
        raise TypeError(msg)
    return types[base]


def _names(cols: Iterable[str]) -> str:
    return ", ".join(repr(c) for c in cols)


@dataclass(frozen=True, eq=False)
class Dataset(Generic[R]):
    """One Parquet dataset of a run directory (``runs/<id>/<name>/*.parquet``) and its row type."""

    name: str
    row: type[R]

    @property
    def columns(self) -> tuple[str, ...]:
        """Every column, in schema order."""
        return tuple(f.name for f in fields(self.row))  # type: ignore[arg-type]

    @property
    def required(self) -> tuple[str, ...]:
        """The columns a writer must give (``None`` allowed where the type permits)."""
        return tuple(
            f.name
            for f in fields(self.row)  # type: ignore[arg-type]
            if f.default is MISSING and f.default_factory is MISSING
        )

    @property
    def schema(self) -> pa.Schema:
        return _schema(self)

    def table(self, rows: Iterable[R | Mapping[str, Any]]) -> pa.Table:
        """Rows (this dataset's row type, or mappings of column -> value) as a table with the fixed schema.

        Raises :class:`SchemaError` for a row of another dataset's type, a mapping with a column the
        dataset does not have or without a required one, and a value Arrow cannot store in its column.
        """
        import pyarrow as pa

        schema = self.schema
        names = self.columns
        known, required = frozenset(names), frozenset(self.required)
        data: dict[str, list[Any]] = {n: [] for n in names}
        for i, r in enumerate(rows):
            if isinstance(r, self.row):
                for n in names:
                    data[n].append(getattr(r, n))
                continue
            if is_dataclass(r) or not isinstance(r, Mapping):
                msg = f"{self.name}: row {i} is a {type(r).__name__}, not a {self.row.__name__} or a mapping"
                raise SchemaError(msg)
            unknown = [k for k in r if k not in known]
            if unknown:
                msg = (
                    f"{self.name}: row {i} has unknown column(s) {_names(unknown)}: not in the "
                    f"{self.name} schema (pmem.rundir.{self.row.__name__})"
                )
                raise SchemaError(msg)
            missing = sorted(required.difference(r))
            if missing:
                msg = f"{self.name}: row {i} lacks required column(s) {_names(missing)}"
                raise SchemaError(msg)
            for n in names:
                data[n].append(r.get(n))
        arrays = []
        for f in schema:
            try:
                arrays.append(pa.array(data[f.name], type=f.type))
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError) as exc:
                msg = f"{self.name}: column {f.name!r} ({f.type}): {exc}"
                raise SchemaError(msg) from exc
        return pa.Table.from_arrays(arrays, schema=schema)

    def conform(self, table: pa.Table) -> pa.Table:
        """A table built column-wise (Polars, Arrow) checked and cast to the fixed schema.

        Same rules as :meth:`table`: unknown or missing required columns raise; absent optional columns
        become nulls; the columns are put in schema order and cast to their types.
        """
        import pyarrow as pa

        have = table.column_names
        unknown = [c for c in have if c not in self.columns]
        if unknown:
            msg = f"{self.name}: unknown column(s) {_names(unknown)}: not in the {self.name} schema"
            raise SchemaError(msg)
        missing = [c for c in self.required if c not in have]
        if missing:
            msg = f"{self.name}: lacks required column(s) {_names(missing)}"
            raise SchemaError(msg)
        arrays = []
        for f in self.schema:
            if f.name not in have:
                arrays.append(pa.nulls(table.num_rows, type=f.type))
                continue
            try:
                arrays.append(table.column(f.name).cast(f.type))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
                msg = f"{self.name}: column {f.name!r} cannot be {f.type}: {exc}"
                raise SchemaError(msg) from exc
        return pa.Table.from_arrays(arrays, schema=self.schema)


@functools.cache
def _schema(ds: Dataset[Any]) -> pa.Schema:
    import pyarrow as pa

    if ds.row is HistoryRow:
        _check_op_columns(ds.columns)
    return pa.schema([(f.name, _arrow_type(str(f.type))) for f in fields(ds.row)])  # type: ignore[arg-type]


def _check_op_columns(names: tuple[str, ...]) -> None:
    """histories/ counts each operation of the graph in its own column, in the graph's order."""
    from pmem.graph import OPS

    have = [n for n in names if n.startswith(C.OPS_PREFIX)]
    want = [C.op_column(op) for op in OPS]
    if have != want:
        msg = f"histories: operation columns {have} do not follow pmem.graph.OPS {list(OPS)}"
        raise SchemaError(msg)


RESULTS: Dataset[ResultRow] = Dataset("results", ResultRow)
WRITES: Dataset[WriteRow] = Dataset("writes", WriteRow)
REQUESTS: Dataset[RequestRow] = Dataset("requests", RequestRow)
HISTORIES: Dataset[HistoryRow] = Dataset("histories", HistoryRow)
JUDGMENTS: Dataset[JudgmentRow] = Dataset("judgments", JudgmentRow)
CALIBRATION: Dataset[CalibrationRow] = Dataset("calibration", CalibrationRow)

#: every Parquet dataset of a run directory, by its directory name
DATASETS: dict[str, Dataset[Any]] = {
    d.name: d for d in (RESULTS, WRITES, REQUESTS, HISTORIES, JUDGMENTS, CALIBRATION)
}


def dataset(name: str) -> Dataset[Any]:
    """The dataset called ``name`` (its directory under ``runs/<id>/``)."""
    try:
        return DATASETS[name]
    except KeyError:
        msg = f"no run dataset {name!r} (known: {', '.join(DATASETS)})"
        raise SchemaError(msg) from None


def to_table(name: str, rows: Iterable[Any]) -> pa.Table:
    """Rows of dataset ``name`` as an Arrow table with its fixed schema (see :meth:`Dataset.table`)."""
    return dataset(name).table(rows)
