"""The evidence nodes' columns: texts, sources, arrival seqs, observation and valid times, erasures."""

from __future__ import annotations

from array import array
from collections.abc import Container, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np

from pmem.graph._ops._store._arrays import (
    EvidenceArrays,
    extend,
    flags,
    ints,
    own,
    restore_columns,
    typed,
    view,
)
from pmem.graph._ops._texts import TextColumn
from pmem.graph._ops._validate import valid_instant

if TYPE_CHECKING:
    from datetime import datetime

    import pyarrow as pa

#: the source an erased evidence is left with: who made the statement goes with it
ERASED_SOURCE = "erased"


class EvidenceColumns:
    """Every evidence node, by index (public id ``e<n>``): text, source code, arrival seq; time and valid
    time sparse.

    >>> evidence = EvidenceColumns()
    >>> evidence.append("the budget is $30k", evidence.admit_source("boss"), 1, None)
    0
    >>> evidence.fields(0)
    ('the budget is $30k', 'boss', None, 1, None)
    """

    def __init__(self) -> None:
        self.ev_text = TextColumn()  # Arrow-backed: written once, read rarely (pmem.graph._ops._texts)
        self.ev_source: array[int] = array("q")  # code into sources
        self.ev_seq: array[int] = array("q")
        self.ev_time: dict[int, str] = {}  # sparse: only evidence that carries a time
        self.ev_valid: dict[int, str] = {}  # sparse: evidence that says when its facts became true
        self.valid_at: dict[int, datetime] = {}  # the same, parsed (naive UTC): not saved
        self.sources: list[str] = []
        self.source_code: dict[str, int] = {}
        self.erased: set[int] = set()  # erased evidence

    # ------------------ writing

    def admit_source(self, source: str) -> int:
        """The code of ``source``, admitting it when new."""
        code = self.source_code.get(source)
        if code is None:
            code = self.source_code[source] = len(self.sources)
            self.sources.append(source)
        return code

    def append(self, text: str, source: int, seq: int, time: str | None) -> int:
        """Admit an evidence node (``source``: a code of :meth:`admit_source`) arriving at ``seq``; its index."""
        n = len(self.ev_seq)
        self.ev_text.append(text)
        self.ev_source.append(source)
        self.ev_seq.append(seq)
        if time is not None:
            self.ev_time[n] = time
        return n

    def set_valid_time(self, ev: int, text: str, at: datetime) -> None:
        """Evidence ``ev`` states facts true from ``text`` (ISO 8601), parsed as ``at`` (naive UTC)."""
        self.ev_valid[ev] = text
        self.valid_at[ev] = at

    def erase(self, ev: int, ranked: Container[str]) -> None:
        """Mark evidence ``ev`` erased and blank what identifies the statement: its text, its time, its
        valid time, and its source (which becomes :data:`ERASED_SOURCE`; the source's name leaves the
        columns too when no other evidence names it and it is not one of the ``ranked`` sources, which an
        authority setting names). Its id and seq stay: every later arrival is numbered after it."""
        self.erased.add(ev)
        self.ev_text[ev] = ""
        self.ev_time.pop(ev, None)
        self.ev_valid.pop(ev, None)
        self.valid_at.pop(ev, None)
        code = self.ev_source[ev]
        name = self.sources[code]
        if name == ERASED_SOURCE:
            return
        if self.ev_source.count(code) == 1 and name not in ranked:
            # the name is no one else's: its code stays (the codes after it keep their numbers) and
            # reads ERASED_SOURCE, which names the first code of that text (as a load derives it)
            self.sources[code] = ERASED_SOURCE
            del self.source_code[name]
            self.source_code[ERASED_SOURCE] = min(code, self.source_code.get(ERASED_SOURCE, code))
        else:
            self.ev_source[ev] = self.admit_source(ERASED_SOURCE)

    def share(self, other: EvidenceColumns) -> None:
        """Read ``other``'s texts, sources, seqs and valid times as these columns' own (shared, not
        copied): a scratch store replaying one of ``other``'s keys."""
        self.ev_text, self.ev_source, self.ev_seq = other.ev_text, other.ev_source, other.ev_seq
        self.sources, self.source_code = other.sources, other.source_code
        self.ev_valid, self.valid_at = other.ev_valid, other.valid_at

    def extend(
        self, texts: pa.Array[Any], sources: np.ndarray, seqs: np.ndarray, times: dict[int, str]
    ) -> None:
        """Admit evidence nodes: their texts (kept as Arrow), source codes and seqs; ``times``: the
        observation times of those that have one, by index from the first new node (0)."""
        n0 = len(self.ev_seq)
        self.ev_text.extend_arrow(texts)
        extend(self.ev_source, sources)
        extend(self.ev_seq, seqs)
        self.ev_time.update((n0 + i, time) for i, time in times.items())

    def load(self, arrays: EvidenceArrays) -> None:
        """Take the columns of a saved state (empty columns only)."""
        self.sources = list(arrays.sources)
        self.source_code = first_codes(self.sources)
        self.ev_text = TextColumn()
        self.ev_text.extend_arrow(arrays.text)  # as read: no Python string per text
        self.ev_source, self.ev_seq = typed(arrays.source), typed(arrays.seq)
        self.ev_time, self.ev_valid = own(arrays.time), own(arrays.valid)
        self.valid_at = {n: valid_instant(text, "load")[1] for n, text in self.ev_valid.items()}
        self.erased = set(np.flatnonzero(arrays.erased).tolist())

    def restore(self, columns: Mapping[str, Any]) -> None:
        """Set the columns of :data:`RESTORED` that ``columns`` holds (``ev_text`` as a list of strings),
        rebuilding the lookups derived from them (source codes, parsed valid times)."""
        restore_columns(self, RESTORED - {"ev_text"}, columns)
        if "ev_text" in columns:
            self.ev_text = TextColumn(columns["ev_text"])
        if "sources" in columns:
            self.source_code = first_codes(self.sources)
        if "ev_valid" in columns:
            self.valid_at = {n: valid_instant(text, "load")[1] for n, text in self.ev_valid.items()}

    # ------------------ reading

    def count(self) -> int:
        """How many evidence nodes there are (the next one's index)."""
        return len(self.ev_seq)

    def source_id(self, source: str) -> int | None:
        """The code of ``source``; None when not seen yet."""
        return self.source_code.get(source)

    def source_name(self, ev: int) -> str:
        """The source evidence ``ev`` came from."""
        return self.sources[self.ev_source[ev]]

    def has_valid_times(self) -> bool:
        """Whether any evidence states a valid time."""
        return bool(self.valid_at)

    def valid_instant(self, ev: int) -> datetime | None:
        """When evidence ``ev``'s facts became true (naive UTC); None when it does not say."""
        return self.valid_at.get(ev)

    def is_erased(self, ev: int) -> bool:
        return ev in self.erased

    def has_erasures(self) -> bool:
        return bool(self.erased)

    def has_observation_times(self) -> bool:
        """Whether any evidence carries an observation time."""
        return bool(self.ev_time)

    def fields(self, ev: int) -> tuple[str, str, str | None, int, str | None]:
        """Evidence ``ev``: (text, source, observation time, seq, valid time)."""
        return (
            self.ev_text[ev],
            self.sources[self.ev_source[ev]],
            self.ev_time.get(ev),
            self.ev_seq[ev],
            self.ev_valid.get(ev),
        )

    def times(self, ev: int) -> tuple[str | None, str | None]:
        """Evidence ``ev``'s (observation time, valid time), each None when not given."""
        return self.ev_time.get(ev), self.ev_valid.get(ev)

    def is_seq(self, seq: int) -> bool:
        """Whether an observation arrived at ``seq``."""
        ev = view(self.ev_seq)
        i = int(np.searchsorted(ev, seq))  # evidence arrives in seq order
        return i < len(ev) and int(ev[i]) == seq

    def seqs(self) -> np.ndarray:
        """The arrival seq of every evidence node (a copy)."""
        return np.array(self.ev_seq, np.int64)

    def erased_ids(self) -> np.ndarray:
        """The indexes of the erased evidence (any order)."""
        return np.fromiter(self.erased, np.int64, len(self.erased))

    def arrays(self) -> EvidenceArrays:
        """Every evidence node, column-wise."""
        return EvidenceArrays(
            ints(self.ev_seq),
            self.ev_text.to_arrow(),
            ints(self.ev_source, np.int32),
            tuple(self.sources),
            MappingProxyType(self.ev_time),
            MappingProxyType(self.ev_valid),
            flags(len(self.ev_seq), self.erased),
        )


def first_codes(sources: list[str]) -> dict[str, int]:
    """Each source's code: its first in ``sources`` (an erasure may leave a text at two codes)."""
    codes: dict[str, int] = {}
    for code, source in enumerate(sources):
        codes.setdefault(source, code)
    return codes


#: the group's columns, and those a legacy state's load sets (less the lookups derived from them)
COLUMNS = frozenset(vars(EvidenceColumns()))
RESTORED = COLUMNS - {"source_code", "valid_at"}
