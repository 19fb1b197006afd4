"""What a state's metadata must agree with: its tables, and the names this code gives things.

A state's digests prove its bytes are the ones written, not that whoever wrote them wrote a graph: a
metadata entry edited and the file sealed again (the digest sits beside the data, anyone can reseal)
must not load as another graph. So the entries that the tables can contradict are checked against them,
and the others against what they can be:

- ``seq``, the last arrival seq, must number the arrivals the tables hold: evidence and operations share
  one counter, so their seqs are exactly 1 to ``seq``, each once. (A ``seq`` of 5999 on a state of 6000
  arrivals would have new writes reuse seq 6000, and ``as_of(6000)`` miss the newest value.)
- ``registry`` (the identity settings) is null or exactly its three settings, of their types; null only
  when the identity tables are empty (a graph without a registry saves none).
- ``authority`` is the four settings of source authority, of their types, each setting made after a seq
  the graph had reached.
- the code tables (``statuses``, ``ops``, ``edge_kinds``) are this code's (a prefix of them in schemas
  before the flat tables, which stored codes as numbers).

Each check raises :class:`Disagreement` (a ``ValueError``) naming the entry; the file layer turns it
into a ``StateFileError`` naming the file.

>>> import numpy as np
>>> check_arrivals(3, np.array([1, 3]), np.array([2]))
>>> check_arrivals(2, np.array([1, 3]), np.array([2]))
Traceback (most recent call last):
...
pmem.graph._persist._consistency.Disagreement: its metadata's seq is 2, but its tables hold 3 arrivals (evidence and operations)
"""

from __future__ import annotations

import json
import numbers
import re
from typing import TYPE_CHECKING, Any

import numpy as np

from pmem.graph._ops._codes import EDGE_KINDS, LOG_OPS, STATUSES

if TYPE_CHECKING:
    import pyarrow as pa
    from numpy.typing import NDArray

    from pmem.graph._graph import ProvenanceGraph

#: The settings a saved registry holds (``KeyRegistry.config()``) and the type of each.
_REGISTRY_SETTINGS: dict[str, tuple[type, ...]] = {
    "threshold": (numbers.Real,),
    "embedding": (str,),
    "confirm": (str,),
}
#: The authority entry's settings, and those schema 2 and 3 held (their settings were a table).
_AUTHORITY_KEYS = {"configured", "from_start", "default", "settings"}
_AUTHORITY_KEYS_LEGACY = {"configured", "from_start", "default"}
#: The first schema of the flat tables, whose code tables are this code's exactly.
_FLAT_SINCE = 4
_SEQ = re.compile(r"0|[1-9][0-9]{0,17}")


class Disagreement(ValueError):
    """A state's metadata that its tables contradict, or that holds what no graph saves."""


def parse_seq(meta: dict[str, str]) -> int:
    """The metadata's last arrival seq: a non-negative integer, written as :func:`str` writes one."""
    text = meta.get("seq")
    if text is None or not _SEQ.fullmatch(text):
        msg = f"its metadata's seq is {text!r}, not a non-negative integer"
        raise Disagreement(msg)
    return int(text)


def table_arrivals(tables: dict[str, pa.Table]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """The arrival seqs of the flat tables' evidence and operations (their ``seq`` columns).

    Raises:
        Disagreement: a table without an int64 ``seq`` column of no nulls.
    """
    out = []
    for name in ("evidence", "operations"):
        table = tables.get(name)
        if table is None or "seq" not in table.column_names:
            msg = f"its {name} table has no seq column"
            raise Disagreement(msg)
        column = table.column("seq")
        if str(column.type) != "int64" or column.null_count:
            msg = f"its {name} table's seq column is not int64 without nulls"
            raise Disagreement(msg)
        out.append(np.asarray(column.to_numpy(), np.int64))
    return out[0], out[1]


def check_arrivals(seq: int, evidence: NDArray[np.int64], operations: NDArray[np.int64]) -> None:
    """Check that ``seq`` numbers exactly the arrivals of the tables: the seqs of ``evidence`` and
    ``operations`` together are 1 to ``seq``, each once.

    Raises:
        Disagreement: they are not.
    """
    total = len(evidence) + len(operations)
    if seq != total:
        msg = f"its metadata's seq is {seq}, but its tables hold {total} arrivals (evidence and operations)"
        raise Disagreement(msg)
    seen = np.zeros(total + 1, np.bool_)
    for seqs in (evidence, operations):
        if len(seqs) and (int(seqs.min()) < 1 or int(seqs.max()) > total):
            msg = f"its tables hold an arrival seq outside 1 to {total} (its metadata's seq)"
            raise Disagreement(msg)
        seen[seqs] = True
    if not seen[1:].all():
        missing = int(np.flatnonzero(~seen[1:])[0]) + 1
        msg = f"its tables' arrival seqs are not 1 to {total} each once (seq {missing} is missing)"
        raise Disagreement(msg)


def graph_arrivals(graph: ProvenanceGraph) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """The arrival seqs of a built graph's evidence and operations (for states read into the graph's
    columns directly, the schemas before the flat tables).

    Raises:
        Disagreement: the operation log is damaged (see ``GraphStore.arrival_seqs``).
    """
    try:
        return graph.storage.arrival_seqs()
    except ValueError as exc:
        raise Disagreement(str(exc)) from None


def check_metadata(meta: dict[str, str], version: int, registry_tables_empty: bool) -> None:
    """Check the metadata entries a state's tables cannot number: the registry and authority settings
    and the code tables (``seq`` is :func:`check_arrivals`'s).

    Raises:
        Disagreement: an entry is missing, unreadable, of another shape, or contradicts the tables.
    """
    _check_codes(meta, version)
    registry = _json(meta, "registry")
    if registry is None:
        if not registry_tables_empty:
            msg = "its metadata's registry is null, but its identity tables are not empty"
            raise Disagreement(msg)
    elif not isinstance(registry, dict) or set(registry) != set(_REGISTRY_SETTINGS):
        msg = f"its metadata's registry is {_shown(registry)}, not null or the settings {sorted(_REGISTRY_SETTINGS)}"
        raise Disagreement(msg)
    else:
        for name, kinds in _REGISTRY_SETTINGS.items():
            if not isinstance(registry[name], kinds) or isinstance(registry[name], bool):
                msg = f"its metadata's registry {name} is {_shown(registry[name])}, of the wrong type"
                raise Disagreement(msg)
    _check_authority(meta, version)


def _check_codes(meta: dict[str, str], version: int) -> None:
    expected = {"statuses": STATUSES, "ops": LOG_OPS}
    if version >= _FLAT_SINCE:
        expected["edge_kinds"] = EDGE_KINDS
    for name, names in expected.items():
        listed = _json(meta, name)
        exact = version >= _FLAT_SINCE
        if not isinstance(listed, list) or (
            listed != list(names) if exact else listed != list(names[: len(listed)])
        ):
            msg = f"its metadata's {name} are {_shown(listed)}, not this code's {list(names)}"
            raise Disagreement(msg)


def _check_authority(meta: dict[str, str], version: int) -> None:
    if version < 2 and "authority" not in meta:  # schema 1 predates source authority
        return
    authority = _json(meta, "authority")
    keys = _AUTHORITY_KEYS if version >= _FLAT_SINCE else _AUTHORITY_KEYS_LEGACY
    if not isinstance(authority, dict) or set(authority) != keys:
        msg = f"its metadata's authority is {_shown(authority)}, not the settings {sorted(keys)}"
        raise Disagreement(msg)
    flags = (authority["configured"], authority["from_start"])
    if not all(isinstance(f, bool) for f in flags) or not _integer(authority["default"]):
        msg = f"its metadata's authority {_shown(authority)} has a setting of the wrong type"
        raise Disagreement(msg)
    if authority["from_start"] and not authority["configured"]:
        msg = "its metadata's authority is set from the start but not configured"
        raise Disagreement(msg)
    if version < _FLAT_SINCE:
        return
    settings = authority["settings"]
    seq = parse_seq(meta)
    after = -1
    ok = isinstance(settings, list) and (authority["configured"] or not settings)
    for setting in settings if ok else ():
        if not (
            isinstance(setting, list)
            and len(setting) == 3
            and _integer(setting[0])
            and after <= setting[0] <= seq
            and isinstance(setting[1], str)
            and setting[1]
            and _integer(setting[2])
        ):
            ok = False
            break
        after = setting[0]
    if not ok:
        msg = f"its metadata's authority settings {_shown(settings)} are not [seq, source, level] in order"
        raise Disagreement(msg)


def _integer(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _json(meta: dict[str, str], name: str) -> Any:
    text = meta.get(name)
    if text is None:
        msg = f"its metadata has no {name!r} entry"
        raise Disagreement(msg)
    try:
        return json.loads(text)
    except ValueError:
        msg = f"its metadata's {name} is not JSON: {text[:60]!r}"
        raise Disagreement(msg) from None


def _shown(value: object) -> str:
    text = json.dumps(value) if not isinstance(value, float) else repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
