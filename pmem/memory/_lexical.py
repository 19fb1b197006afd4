"""BM25 over the slots of a memory's texts (cells, evidence), with :mod:`bm25s`.

Slots are set and cleared as the memory changes; the BM25 index is built from the live slots at the
next search after a change (bm25s indexes a fixed corpus), so a burst of writes costs one build.
Words are lower-cased, English stop words dropped and the rest stemmed (PyStemmer's Snowball English,
the stemmer bm25s names); a key's dots and underscores separate words, so ``caroline.support_group`` is
found by "support groups".

>>> ix = LexicalIndex()
>>> ix.set(0, "Caroline went to an LGBTQ support group.")
>>> ix.set(1, "Melanie painted a sunrise.")
>>> ix.set(2, "melanie.hobby: painting")
>>> [slot for slot, _ in ix.search("What did Melanie paint?", 3)]
[1, 2]
>>> [slot for slot, _ in ix.search("support groups", 3)]
[0]
"""

from __future__ import annotations

import re

import bm25s
import numpy as np
import Stemmer
from bm25s.tokenization import Tokenizer

_SEPARATORS = re.compile(r"[._]+")
#: the id bm25s gives a query word the corpus does not hold
_UNKNOWN = 0
_STEM = Stemmer.Stemmer("english").stemWord


def _words(text: str) -> str:
    return _SEPARATORS.sub(" ", text)


class LexicalIndex:
    """BM25 (bm25s, Lucene's scoring) over texts held in numbered slots; search is best first."""

    def __init__(self) -> None:
        self._texts: dict[int, str] = {}  # live slot -> its text
        # built at the next search after a change: the tokenizer's vocabulary, the index and the slot of
        # each of its rows (None: nothing built since the last change)
        self._built: tuple[Tokenizer, bm25s.BM25, list[int]] | None = None

    def __len__(self) -> int:
        return len(self._texts)

    def set(self, slot: int, text: str) -> None:
        self._texts[slot] = _words(text)
        self._built = None

    def clear(self, slot: int) -> None:
        if self._texts.pop(slot, None) is not None:
            self._built = None

    def _index(self) -> tuple[Tokenizer, bm25s.BM25, list[int]]:
        if self._built is None:
            slots = sorted(self._texts)
            tokenizer = Tokenizer(stopwords="en", stemmer=_STEM)
            ids = tokenizer.tokenize(
                [self._texts[s] for s in slots], update_vocab=True, return_as="ids", show_progress=False
            )
            index = bm25s.BM25()
            index.index(ids, show_progress=False)
            self._built = (tokenizer, index, slots)
        return self._built

    def search(self, query: str, k: int) -> list[tuple[int, float]]:
        """The ``k`` slots whose texts score highest for ``query`` by BM25, best first, as (slot,
        score); slots that share no word with the query are left out. Ties: the lower slot first."""
        if not self._texts or k <= 0:
            return []
        tokenizer, index, slots = self._index()
        (ids,) = tokenizer.tokenize([_words(query)], update_vocab=False, return_as="ids", show_progress=False)
        known = [i for i in ids if i != _UNKNOWN]
        if not known:
            return []
        scores = np.asarray(index.get_scores(known), dtype=np.float64)
        order = sorted((i for i in np.flatnonzero(scores > 0)), key=lambda i: (-scores[i], slots[i]))
        return [(slots[i], float(scores[i])) for i in order[:k]]
