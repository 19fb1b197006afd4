"""Recall: the facts and the evidence a question needs, ranked, within a token budget, as dated lines.

A memory answers from two layers. The facts are its cells: the current value of each key, with its
status and the turn it cites. The evidence is every observed turn, with its speaker (the source) and its
time. Recall ranks both for a query four ways: BM25 over the facts and over the turns
(:class:`~pmem.memory._lexical.LexicalIndex`) and the embedder's cosine over each
(:class:`~pmem.memory._retrieval.VectorIndex`); the four rankings are fused by reciprocal rank
(:func:`fuse`, k = 60: a list's top item counts 1/61, its tenth 1/70, whichever list it comes from, so
neither layer nor either scorer needs its scores calibrated against the other's). Items are taken in
fused order while they fit the budget; the context lists the facts in that order, then the turns in the
order they were observed, so that dates read forward.

Lines (:func:`fact_line`, :func:`evidence_line`)::

    caroline.support_group = LGBTQ support group (current; from D1:3, 8 May 2023)
    [8 May 2023] Caroline: I went to a LGBTQ support group yesterday. (D1:3)

This is the one read of the ``pmem`` arms (``read = "recall"``) and of :meth:`pmem.Memory.recall`.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Literal, TypeVar

from pmem.graph import ERASED_SOURCE, escape_value
from pmem.memory._lexical import LexicalIndex
from pmem.memory._retrieval import VectorIndex

if TYPE_CHECKING:
    import numpy as np

    from pmem.graph import Evidence, ProvenanceGraph

T = TypeVar("T", bound=Hashable)
U = TypeVar("U")

#: reciprocal rank fusion's constant (Cormack et al. 2009; Zep and Hindsight use 40-60)
RRF_K = 60
#: how many items each of the four rankings contributes to the fusion
CANDIDATES = 40
#: earlier (and retracted) values a fact line names (its history is one hop away: ``why``, ``history``)
EARLIER_SHOWN = 2
#: month names as a reader is shown them (not ``strftime("%B")``, which follows the process's locale)
_MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
#: version statuses of values declared wrong (a fact line names them as retracted, not as earlier)
_WRONG = frozenset({"revoked", "contradicted"})


def fuse(rankings: Sequence[Sequence[T]], k: int = RRF_K) -> list[tuple[T, float]]:
    """Reciprocal rank fusion: each item scores the sum of ``1 / (k + rank)`` over the rankings that
    hold it (rank 1 first); best first, ties in order of first appearance.

    >>> fuse([["a", "b", "c"], ["c", "a"]])
    [('a', 0.0325...), ('c', 0.0322...), ('b', 0.0161...)]
    """
    scores: dict[T, float] = {}
    for ranking in rankings:
        for rank, item in enumerate(ranking, start=1):
            scores[item] = scores.get(item, 0.0) + 1.0 / (k + rank)
    order = {item: i for i, item in enumerate(scores)}
    return sorted(scores.items(), key=lambda kv: (-kv[1], order[kv[0]]))


def day(time: str | None) -> str | None:
    """The date of an observation time, as the reader is shown it: an ISO date-time's day written as
    people write dates (a reader answers a "when" question in the form it read: "2023-05-08" scores
    nothing against "8 May 2023"); free text as it is.

    >>> day("2023-05-08T13:56:00"), day("2024-11-30"), day("yesterday"), day(None)
    ('8 May 2023', '30 November 2024', 'yesterday', None)
    """
    if not time:
        return None
    try:
        when = datetime.fromisoformat(time).date()
    except ValueError:
        return time
    return f"{when.day} {_MONTHS[when.month - 1]} {when.year}"


@dataclass(frozen=True)
class Recalled:
    """One item of a recall: a fact (a key's cell) or a turn (an evidence node)."""

    kind: Literal["fact", "evidence"]
    #: the key of a fact, the evidence id of a turn
    id: str
    line: str
    #: the evidence the line cites: a fact's cited turn, a turn itself (empty: none known)
    cites: tuple[str, ...]
    #: fused reciprocal-rank score (higher first)
    score: float
    tokens: int


def evidence_line(ev: Evidence, label: str | None = None) -> str:
    """A turn as one dated line with its speaker, and its label (the benchmark's turn id) where known.

    >>> from pmem.graph import Evidence
    >>> evidence_line(Evidence("e3", "I went to a support group.", "Caroline", "2023-05-08T13:56:00", 4), "D1:3")
    '[8 May 2023] Caroline: I went to a support group. (D1:3)'
    """
    when = day(ev.time)
    text = " ".join(escape_value(ev.text).split())
    out = f"[{when}] {ev.source}: {text}" if when else f"{ev.source}: {text}"
    return f"{out} ({label})" if label and label != ev.id else out


def fact_line(
    graph: ProvenanceGraph, key: str, cite: Callable[[str], str], disclose: Sequence[str] = ("alternatives",)
) -> tuple[str, str | None] | None:
    """A key's cell as one line, with its status, the turn its current value cites and that turn's date,
    its last earlier values (and values retracted as wrong), its open alternatives and stale premises;
    with the evidence id cited. None when the key holds no value.

    >>> from pmem.graph import ProvenanceGraph
    >>> g = ProvenanceGraph()
    >>> e0 = g.observe("I live in Paris.", source="Ann", time="2023-05-01T10:00:00")
    >>> _ = g.apply("accept", "ann.city", "Paris", evidence=e0)
    >>> e1 = g.observe("I moved to Rome.", source="Ann", time="2023-06-02T10:00:00")
    >>> _ = g.apply("accept", "ann.city", "Rome", evidence=e1)
    >>> fact_line(g, "ann.city", lambda e: e)
    ('ann.city = Rome (current; from e1, 2 June 2023; earlier: Paris)', 'e1')
    """
    cell = graph.cell(key)
    if cell is None or cell.value is None:
        return None
    head = next(
        (
            v
            for v in reversed(graph.versions(key))
            if v.valid_to is None and v.alternative_of is None and v.value == cell.value
        ),
        None,
    )
    status = {"contested": "contested", "active": "current"}.get(cell.status, cell.status)
    if cell.held:
        status = "current, held by source authority"
    notes = [status]
    cited = head.evidence if head is not None else None
    if cited is not None:
        ev = graph.evidence(cited)
        when = day(ev.time)
        notes.append(f"from {cite(cited)}, {when}" if when else f"from {cite(cited)}")
    # what it held before, newest first: values that were displaced, and values withdrawn as wrong
    # (a cell's history holds no undone version, and an erased one has no value)
    past = [v for v in cell.history if v.value and v.value != cell.value]
    for label, chosen in (
        ("earlier", [v for v in past if v.status not in _WRONG]),
        ("retracted", [v for v in past if v.status in _WRONG]),
    ):
        if chosen:
            notes.append(
                f"{label}: " + "; ".join(escape_value(v.value) for v in chosen[-EARLIER_SHOWN:][::-1])
            )
    line = f"{key} = {escape_value(cell.value)} ({'; '.join(notes)})"
    if "alternatives" in disclose and cell.alternatives:
        line += " | alternatives: " + "; ".join(map(escape_value, cell.alternatives))
    if cell.stale:
        line += " | stale: premise " + ", ".join(cell.stale) + " changed"
    return line, cited


def fact_line_value(line: str) -> str:
    """The value a fact line (:func:`fact_line`, or a state read's ``key = value ...``) shows.

    >>> fact_line_value("ann.city = Rome (current; from e1, 2023-06-02) | alternatives: Oslo")
    'Rome'
    """
    rest = line.split(" = ", 1)[-1]
    for mark in (" (", " | ", " ["):
        cut = rest.find(mark)
        if cut >= 0:
            rest = rest[:cut]
    return rest.strip()


def fit(ranked: Sequence[U], budget: int | None, tokens: Callable[[U], int]) -> list[U]:
    """The items of ``ranked`` (best first) that fit ``budget`` tokens together, in rank order (None:
    all); one that does not fit is passed over for smaller ones after it.

    >>> fit(["aaaa", "bbbbbbbb", "cc"], 6, len)
    ['aaaa', 'cc']
    """
    if budget is None:
        return list(ranked)
    out, used = [], 0
    for item in ranked:
        size = tokens(item)
        if used + size <= budget:
            out.append(item)
            used += size
    return out


def context_lines(items: Sequence[Recalled]) -> list[str]:
    """The reader's context: the facts in rank order, then the turns in the order observed."""
    facts = [i.line for i in items if i.kind == "fact"]
    turns = sorted((i for i in items if i.kind == "evidence"), key=lambda i: int(i.id[1:]))
    return facts + [i.line for i in turns]


class EvidenceIndex:
    """The turns' side of recall: each evidence node's text, lexically and densely, by its number.

    It follows the graph it is synced with: evidence observed since the last sync is indexed at the
    next (:meth:`sync`), and an erased node is dropped when a search meets it (:meth:`drop`)."""

    def __init__(self) -> None:
        self._lexical = LexicalIndex()
        self._dense = VectorIndex()
        self._indexed = 0  # evidence numbers below this one are indexed (or erased)

    async def sync(self, graph: ProvenanceGraph, embed: Callable[[list[str]], object]) -> None:
        """Index the evidence ``graph`` observed since the last sync (``embed``: texts -> vectors)."""
        count = graph.storage.evidence.count()
        if count <= self._indexed:
            return
        numbers, texts = [], []
        for n in range(self._indexed, count):
            ev = graph.evidence(f"e{n}")
            if ev.source == ERASED_SOURCE or not ev.text.strip():
                continue
            numbers.append(n)
            texts.append(f"{ev.source}: {ev.text}")
        self._indexed = count
        for n, text in zip(numbers, texts, strict=True):
            self._lexical.set(n, text)
        if texts:
            vectors = await embed(texts)  # type: ignore[misc]
            self._dense.set_many(numbers, vectors)

    def drop(self, n: int) -> None:
        """Forget evidence ``n`` (erased: its text is gone from the graph)."""
        self._lexical.clear(n)
        self._dense.clear(n)

    def rankings(self, query: str, vector: np.ndarray, k: int) -> tuple[list[int], list[int]]:
        """Evidence numbers ranked for ``query``: by BM25, and by cosine to ``vector``."""
        lexical = [n for n, _ in self._lexical.search(query, k)]
        dense = [n for n, _ in self._dense.search(vector, k)]
        return lexical, dense
