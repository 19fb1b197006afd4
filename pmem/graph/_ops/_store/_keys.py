"""The keys' columns: an id per name, and per key its head, its newest version and its head's open
alternatives."""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, cast

import numpy as np
import pyarrow as pa

from pmem.graph._ops._codes import NONE
from pmem.graph._ops._store._arrays import KeyArrays, ints, restore_columns, typed
from pmem.graph._read._keyindex import KeyIndex


class KeyColumns:
    """Every key by id (a head's value is its version's: see the store).

    >>> keys = KeyColumns()
    >>> kid = keys.new("budget")
    >>> keys.set_head(kid, 0), keys.head(kid), keys.id("budget")
    (None, 0, 0)
    """

    def __init__(self) -> None:
        self.kid: dict[str, int] = {}
        self.key_names: list[str] = []
        self.k_head: array[int] = array("q")  # NONE: an empty cell
        self.k_newest: array[int] = array("q")  # the end of the key's arrival chain
        self.open_alts: dict[int, list[int]] = {}  # key id -> open alternatives of its head
        self._index: KeyIndex | None = None  # apply_batch's key lookup (not saved)

    # ------------------ writing

    def new(self, name: str) -> int:
        """Admit key ``name`` (empty: no head, no version) and return its id."""
        kid = self.kid[name] = len(self.key_names)
        self.key_names.append(name)
        self.k_head.append(NONE)
        self.k_newest.append(NONE)
        return kid

    def admit(self, name: str) -> int:
        """The id of key ``name``, admitting it (empty) when new."""
        kid = self.kid.get(name)
        return self.new(name) if kid is None else kid

    def set_head(self, kid: int, vid: int) -> None:
        """Make version ``vid`` (NONE: no version, an empty cell) the head of key ``kid``."""
        self.k_head[kid] = vid

    def push(self, kid: int, vid: int) -> int:
        """Make ``vid`` the newest version of key ``kid``; the one that was (NONE: none)."""
        newest = self.k_newest
        older = newest[kid]
        newest[kid] = vid
        return older

    def supersede_head(self, kid: int, vid: int) -> tuple[int, list[int] | None]:
        """Make ``vid`` both the head and the newest version of key ``kid``, and take the head's open
        alternatives (:meth:`pop_alternatives`) in one call (an accept's, the write's hot path): the newest
        version before, and those alternatives (None: it had none)."""
        newest = self.k_newest
        older = newest[kid]
        self.k_head[kid] = newest[kid] = vid
        return older, self.open_alts.pop(kid, None)

    def set_newest(self, kid: int, vid: int) -> None:
        """Make ``vid`` (NONE: none) the end of key ``kid``'s arrival chain."""
        self.k_newest[kid] = vid

    def add_alternative(self, kid: int, vid: int) -> None:
        """``vid`` is one more open alternative of key ``kid``'s head."""
        self.open_alts[kid] = [*self.open_alts.get(kid, ()), vid]

    def pop_alternatives(self, kid: int) -> list[int]:
        """The open alternatives of key ``kid``'s head, which has none afterwards."""
        return self.open_alts.pop(kid, [])

    def set_alternatives(self, kid: int, vids: list[int]) -> None:
        """Key ``kid``'s head has the open alternatives ``vids`` (none: it leaves the table)."""
        if vids:
            self.open_alts[kid] = vids
        else:
            self.open_alts.pop(kid, None)

    def extend(self, names: list[str]) -> None:
        """Admit the new keys ``names`` (empty cells), in order."""
        k0 = len(self.key_names)
        self.kid.update(zip(names, range(k0, k0 + len(names)), strict=True))
        self.key_names.extend(names)
        empty = np.full(len(names), NONE, np.int64).tobytes()
        self.k_head.frombytes(empty)
        self.k_newest.frombytes(empty)

    def set_heads(
        self, kids: np.ndarray, heads: np.ndarray, kids_newest: np.ndarray, newest: np.ndarray
    ) -> None:
        """Keys ``kids`` get the heads ``heads``; keys ``kids_newest`` the newest versions ``newest``."""
        np.frombuffer(self.k_head, np.int64)[kids] = heads
        np.frombuffer(self.k_newest, np.int64)[kids_newest] = newest

    def update_alternatives(
        self,
        closed: Iterable[int],
        extended: Iterable[tuple[int, list[int]]],
        opened: Iterable[tuple[int, list[int]]],
    ) -> None:
        """Keys whose open alternatives were ``closed`` leave the table; ``extended`` ones keep their place
        with more; ``opened`` ones enter it, in order."""
        for kid in closed:
            del self.open_alts[kid]
        for kid, vids in extended:
            self.open_alts[kid] = self.open_alts[kid] + vids  # in place: the key keeps its place
        for kid, vids in opened:
            self.open_alts[kid] = vids

    def load(self, arrays: KeyArrays) -> None:
        """Take the columns of a saved state (empty columns only).

        Raises:
            ValueError: a key named twice.
        """
        self.key_names = cast("list[str]", arrays.name.to_pylist())
        self.kid = dict(zip(self.key_names, range(len(self.key_names)), strict=True))
        if len(self.kid) != len(self.key_names):
            msg = "the keys table names a key twice"
            raise ValueError(msg)
        self.k_head, self.k_newest = typed(arrays.head), typed(arrays.newest)
        self.open_alts = {kid: list(a) for kid, a in arrays.open_alternatives.items() if a}

    def restore(self, columns: Mapping[str, Any]) -> None:
        """Set the columns of :data:`RESTORED` that ``columns`` holds; key ids from ``key_names``."""
        restore_columns(self, RESTORED, columns)
        if "key_names" in columns:
            self.kid = {name: kid for kid, name in enumerate(self.key_names)}

    # ------------------ reading

    def id(self, name: str) -> int | None:
        """The id of key ``name``; None when it was never written."""
        return self.kid.get(name)

    def name(self, kid: int) -> str:
        return self.key_names[kid]

    def count(self) -> int:
        return len(self.key_names)

    def names(self) -> Iterator[str]:
        """Every key name, in admission order."""
        return iter(self.key_names)

    def head(self, kid: int) -> int:
        """The head version of key ``kid`` (NONE: the cell is empty)."""
        return self.k_head[kid]

    def newest(self, kid: int) -> int:
        """The newest version of key ``kid`` (NONE: none)."""
        return self.k_newest[kid]

    def find(self, name: str) -> tuple[int, int] | None:
        """Key ``name``'s id and head (NONE: an empty cell); None when never written."""
        kid = self.kid.get(name)
        return None if kid is None else (kid, self.k_head[kid])

    def alternatives(self, kid: int) -> list[int]:
        """The open alternatives of key ``kid``'s head (a new list)."""
        return list(self.open_alts.get(kid, ()))

    def has_alternatives(self, kid: int) -> bool:
        return kid in self.open_alts

    def cells(self) -> list[tuple[str, int]]:
        """(key, key id) of every non-empty cell, in admission order."""
        heads = self.k_head
        return [(key, kid) for key, kid in self.kid.items() if heads[kid] != NONE]

    def heads(self) -> list[tuple[str, int]]:
        """(key, head version) of every non-empty cell, in admission order."""
        heads = self.k_head
        return [(key, heads[kid]) for key, kid in self.kid.items() if heads[kid] != NONE]

    def cell_count(self) -> int:
        """How many keys have a head."""
        return len(self.k_head) - self.k_head.count(NONE)

    def heads_of(self, kids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The head and the newest version of each of the keys ``kids`` (copies)."""
        return (
            np.frombuffer(self.k_head, np.int64)[kids],  # fancy indexing copies: no view outlives this
            np.frombuffer(self.k_newest, np.int64)[kids],
        )

    def head_array(self) -> np.ndarray:
        """Every key's head by id (a copy)."""
        return np.array(self.k_head, np.int64)

    def name_array(self) -> pa.Array[Any]:
        """Every key's name by id, as an Arrow array."""
        return pa.array(self.key_names, pa.string())

    def arrays(self) -> KeyArrays:
        """Every key by id, column-wise."""
        return KeyArrays(
            self.name_array(),
            ints(self.k_head),
            ints(self.k_newest),
            {k: tuple(v) for k, v in self.open_alts.items() if v},
        )

    def index(self) -> KeyIndex:
        """The index of the key names (built at the first use, caught up by its own lookups)."""
        if self._index is None or self._index.source is not self.key_names:
            self._index = KeyIndex(self.key_names)
        return self._index

    def ids(self, names: pa.Array[Any], hashes: np.ndarray | None = None) -> np.ndarray:
        """The id of each key of ``names`` (a string array without nulls); -1: not a key."""
        return self.index().lookup(names, self.kid, hashes)


#: the group's columns, and those a legacy state's load sets (less the lookups derived from them)
COLUMNS = frozenset(vars(KeyColumns())) - {"_index"}
RESTORED = COLUMNS - {"kid"}
