"""One key's versions read from a saved state without loading it (memory-mapped, unverified)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from pmem.graph._state import (
    FLAT_SINCE,
    FORMAT,
    READABLE_VERSIONS,
    StateFileError,
    _payloads,
    _refuse,
    journal_path,
)
from pmem.graph._types import Version
from pmem.graph.shards import is_sharded, owning_part

__all__ = ["read_key_versions"]


def read_key_versions(path: str | Path, key: str) -> list[Version]:
    """The versions of ``key`` in a saved state (either layout), read from the memory-mapped tables.

    Only the key names, the ``key_id`` column and the pages of the key's rows are read, so this takes milliseconds
    on a state of millions of operations where ``load`` takes seconds. The price: the whole-file digests
    are not checked (that would read every byte); Arrow validates the rows returned, and a state to be
    trusted whole is read with ``ProvenanceGraph.load``. An unknown key gives an empty list.

    A sharded state (``pmem ingest --shards``) is refused, naming the part that holds the key: that part
    reads the same way, with the part's own ids (``ProvenanceGraph.load`` gives the union's). So is a state
    with a journal of later writes beside it (``pmem.graph._journal``): the saved file alone is not it.

    >>> import tempfile
    >>> from pmem.graph import ProvenanceGraph
    >>> g = ProvenanceGraph()
    >>> _ = g.apply("accept", "budget", "$30k"), g.apply("accept", "budget", "$50k")
    >>> state = tempfile.mkdtemp() + "/state.arrow"
    >>> g.save(state)
    >>> [(v.value, v.status) for v in read_key_versions(state, "budget")]
    [('$30k', 'superseded'), ('$50k', 'active')]
    """
    path = Path(path)
    if is_sharded(path):
        part = owning_part(path, key)
        msg = (
            f"{path}: a sharded state, whose parts number their versions and evidence their own way: "
            f"read_key_versions({str(part)!r}, {key!r}) reads the part that holds the key, with its ids; "
            f"ProvenanceGraph.load({str(path)!r}) gives the union's"
        )
        raise StateFileError(msg)
    if journal_path(path).exists():
        msg = (
            f"{path}: writes made since it was saved are in {journal_path(path).name}, which this read of "
            "the saved file alone would miss; ProvenanceGraph.load replays them (a save folds them in)"
        )
        raise StateFileError(msg)
    keys, versions = _mapped_tables(path, ("keys", "versions"))
    key_names = keys.column("key")
    at = pc.index(key_names, pa.scalar(key, type=key_names.type)).as_py()
    if at < 0:
        return []
    kid, newest = keys.column("id")[at].as_py(), keys.column("newest")[at].as_py()
    rows = versions.filter(pc.equal(versions.column("key_id"), kid))
    try:
        rows.validate(full=True)
    except pa.ArrowInvalid as exc:
        raise _refuse(path, f"the rows of {key!r} are damaged ({exc})") from exc
    by_id = {r["id"]: r for r in rows.to_pylist()}
    # the key's arrival order: newest first along `previous` (ids differ after a re-derivation)
    chain: list[dict[str, Any]] = []
    while newest is not None and newest in by_id and len(chain) < len(by_id):
        chain.append(by_id[newest])
        newest = by_id[newest]["previous"]
    if len(chain) != len(by_id):
        raise _refuse(path, f"the versions of {key!r} do not form one arrival chain")
    return [
        Version(
            id=f"v{r['id']}",
            key=r["key"],
            value=r["value"],
            status=r["status"],
            valid_from=r["valid_from"],
            valid_to=r["valid_to"],
            evidence=None if r["evidence"] is None else f"e{r['evidence']}",
            support=r["support"],
            supersedes=None if r["supersedes"] is None else f"v{r['supersedes']}",
            alternative_of=None if r["alternative_of"] is None else f"v{r['alternative_of']}",
        )
        for r in reversed(chain)
    ]


def _mapped_tables(path: Path, names: tuple[str, ...]) -> list[pa.Table]:
    """Tables of a schema-4 state, memory-mapped and unverified (see :func:`read_key_versions`)."""
    try:
        if path.is_dir():
            return [pa.ipc.open_file(pa.memory_map(str(path / f"{n}.arrow"))).read_all() for n in names]
        outer = pa.ipc.open_file(pa.memory_map(str(path))).read_all()
        meta = outer.schema.metadata or {}
        flat = {str(v).encode() for v in READABLE_VERSIONS if v >= FLAT_SINCE}
        if meta.get(b"format") != FORMAT.encode() or meta.get(b"schema_version") not in flat:
            raise _refuse(
                path,
                f"reading one key needs a state of schema {FLAT_SINCE} or later (load and save it again)",
            )
        found = dict(zip(outer.column("table").to_pylist(), _payloads(outer), strict=True))
        return [pa.ipc.open_stream(found[n]).read_all() for n in names]
    except FileNotFoundError:
        raise _refuse(path, "file not found") from None
    except (pa.ArrowInvalid, pa.ArrowIOError, OSError, KeyError) as exc:
        raise _refuse(path, f"truncated or damaged ({type(exc).__name__}: {exc})") from exc
