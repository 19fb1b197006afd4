"""A column of texts held as Arrow arrays: what a graph keeps for its evidence.

Evidence texts are written once and read rarely (an ``evidence()`` view, a replay, a save), and a long
stream holds millions of them: as Python strings they cost about twice their bytes and a conversion on
every save and load. :class:`TextColumn` keeps them as Arrow string arrays (a loaded state's column as
it was read, memory-mapped; a bulk write's column as it came) plus a short Python tail for single appends,
and a few overrides for texts rewritten in place (erasure). It reads like a list.

>>> import pyarrow as pa
>>> texts = TextColumn()
>>> texts.append("first")
>>> texts.extend_arrow(pa.array(["second", "third"], pa.large_string()))
>>> texts.append("fourth")
>>> texts[2], len(texts)
('third', 4)
>>> texts[1] = ""
>>> texts.to_arrow().to_pylist()
['first', '', 'third', 'fourth']
"""

from __future__ import annotations

import bisect
from typing import TYPE_CHECKING, Any, cast, overload

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

_LSTR = pa.large_string()


class TextColumn:
    """Arrow chunks, then a Python tail, then overrides by position (see the module docstring)."""

    def __init__(self, texts: Iterable[str] = ()) -> None:
        self._chunks: list[pa.Array[Any]] = []  # large_string arrays, in order
        self._starts: list[int] = []  # position of each chunk's first text
        self._frozen = 0  # texts held in chunks
        self._tail: list[str] = list(texts)  # texts appended one by one since the last chunk
        self._edits: dict[int, str] = {}  # position in a chunk -> its text now

    def __len__(self) -> int:
        return self._frozen + len(self._tail)

    def append(self, text: str) -> None:
        self._tail.append(text)

    def extend(self, texts: Iterable[str]) -> None:
        self._tail.extend(texts)

    def extend_arrow(self, texts: pa.Array[Any] | pa.ChunkedArray[Any]) -> None:
        """Append an Arrow string array (no nulls) as it is: no Python string is made."""
        self._freeze()
        chunks = texts.chunks if isinstance(texts, pa.ChunkedArray) else [texts]
        for chunk in chunks:
            if len(chunk):
                self._push(chunk.cast(_LSTR))

    def _push(self, chunk: pa.Array[Any]) -> None:
        self._chunks.append(chunk)
        self._starts.append(self._frozen)
        self._frozen += len(chunk)

    def _freeze(self) -> None:
        if self._tail:
            tail, self._tail = self._tail, []
            self._push(pa.array(tail, _LSTR))

    def _position(self, i: int) -> int:
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            msg = f"text index {i} out of range ({n} texts)"
            raise IndexError(msg)
        return i

    @overload
    def __getitem__(self, i: int) -> str: ...
    @overload
    def __getitem__(self, i: slice) -> list[str]: ...
    def __getitem__(self, i: int | slice) -> str | list[str]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        i = self._position(i)
        if i >= self._frozen:
            return self._tail[i - self._frozen]
        edited = self._edits.get(i)
        if edited is not None:
            return edited
        k = bisect.bisect_right(self._starts, i) - 1
        text: str = self._chunks[k][i - self._starts[k]].as_py()
        return text

    def __setitem__(self, i: int, text: str) -> None:
        i = self._position(i)
        if i >= self._frozen:
            self._tail[i - self._frozen] = text
        else:
            self._edits[i] = text

    def __iter__(self) -> Iterator[str]:
        for chunk_start, chunk in zip(self._starts, self._chunks, strict=True):
            texts = cast("list[str]", chunk.to_pylist())
            for offset, text in enumerate(texts):
                yield self._edits.get(chunk_start + offset, text)
        yield from self._tail

    def __eq__(self, other: object) -> bool:
        if isinstance(other, TextColumn | list):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable, compared by content

    def to_arrow(self) -> pa.Array[Any]:
        """Every text as one large_string array (chunks combined, overrides applied)."""
        self._freeze()
        if not self._chunks:
            return pa.array([], _LSTR)
        whole = pa.chunked_array(self._chunks, _LSTR).combine_chunks()
        if self._edits:
            at = sorted(self._edits)
            mask = np.zeros(len(whole), np.bool_)
            mask[at] = True
            whole = pc.replace_with_mask(whole, pa.array(mask), pa.array([self._edits[i] for i in at], _LSTR))
        return whole
