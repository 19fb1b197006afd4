"""The edges kept apart from the versions: supported-by edges added after a version's creation (noop,
repeated values, resolve) and tombstones, each the source of a revokes edge."""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np

from pmem.graph._ops._store._arrays import EdgeArrays, extend, ints, restore_columns, typed


class EdgeColumns:
    """Supported-by edges (version, evidence, seq) and tombstones (version, seq, evidence).

    >>> edges = EdgeColumns()
    >>> edges.add_tombstone(0, seq=3, ev=1)
    >>> list(edges.typed_edges())
    [(3, 0, 0)]
    """

    def __init__(self) -> None:
        self.sb_version: array[int] = array("q")
        self.sb_ev: array[int] = array("q")
        self.sb_seq: array[int] = array("q")
        self.tb_version: array[int] = array("q")
        self.tb_seq: array[int] = array("q")
        self.tb_ev: array[int] = array("q")

    def add_support(self, vid: int, ev: int, seq: int) -> None:
        """A supported-by edge from version ``vid`` to evidence ``ev`` at ``seq``."""
        self.sb_version.append(vid)
        self.sb_ev.append(ev)
        self.sb_seq.append(seq)

    def add_tombstone(self, vid: int, seq: int, ev: int) -> None:
        """A tombstone revoking version ``vid`` at ``seq`` on evidence ``ev``."""
        self.tb_version.append(vid)
        self.tb_seq.append(seq)
        self.tb_ev.append(ev)

    def extend_support(self, versions: np.ndarray, ev: np.ndarray, seqs: np.ndarray) -> None:
        """Supported-by edges: ``versions`` from evidence ``ev`` at ``seqs``."""
        extend(self.sb_version, versions)
        extend(self.sb_ev, ev)
        extend(self.sb_seq, seqs)

    def extend_tombstones(self, versions: np.ndarray, seqs: np.ndarray, ev: np.ndarray) -> None:
        """Tombstones revoking ``versions`` at ``seqs`` on evidence ``ev``."""
        extend(self.tb_version, versions)
        extend(self.tb_seq, seqs)
        extend(self.tb_ev, ev)

    def replace(
        self, key_of: Callable[[int], int], kid: int, source: EdgeColumns, vmap: dict[int, int]
    ) -> None:
        """The edges of key ``kid``'s versions (``key_of``: a version's key id) are ``source``'s,
        its versions mapped through ``vmap``, in place of the old ones."""
        for names in (("sb_version", "sb_ev", "sb_seq"), ("tb_version", "tb_seq", "tb_ev")):
            columns: list[array[int]] = [getattr(self, name) for name in names]
            keep = [j for j, v in enumerate(columns[0]) if key_of(v) != kid]
            if len(keep) != len(columns[0]):
                columns = [array("q", [column[j] for j in keep]) for column in columns]
            replayed: list[array[int]] = [getattr(source, name) for name in names]
            columns[0].extend(vmap[v] for v in replayed[0])
            for name, column, added in zip(names, columns, replayed, strict=True):
                if name != names[0]:
                    column.extend(added)
                setattr(self, name, column)

    def load(self, arrays: EdgeArrays) -> None:
        """Take the columns of a saved state (empty columns only)."""
        self.sb_version, self.sb_ev, self.sb_seq = (
            typed(arrays.support_version),
            typed(arrays.support_evidence),
            typed(arrays.support_seq),
        )
        self.tb_version, self.tb_seq, self.tb_ev = (
            typed(arrays.tombstone_version),
            typed(arrays.tombstone_seq),
            typed(arrays.tombstone_evidence),
        )

    def restore(self, columns: Mapping[str, Any]) -> None:
        """Set the columns of :data:`COLUMNS` that ``columns`` holds."""
        restore_columns(self, COLUMNS, columns)

    def typed_edges(self) -> Iterator[tuple[int, int, int]]:
        """These edges as (kind, source, target): supported-by (0) version -> evidence, then revokes (3)
        tombstone -> version."""
        for v, e in zip(self.sb_version, self.sb_ev, strict=True):
            yield (0, v, e)
        for t, v in enumerate(self.tb_version):
            yield (3, t, v)

    def support_count(self) -> int:
        return len(self.sb_version)

    def tombstone_count(self) -> int:
        return len(self.tb_version)

    def arrays(self) -> EdgeArrays:
        """Both kinds, column-wise."""
        return EdgeArrays(
            ints(self.sb_version),
            ints(self.sb_ev),
            ints(self.sb_seq),
            ints(self.tb_version),
            ints(self.tb_ev),
            ints(self.tb_seq),
        )


#: the group's columns
COLUMNS = frozenset(vars(EdgeColumns()))
