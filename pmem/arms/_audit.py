"""The FactConsolidation write-path audit: is the gold current value where the reader can find it?

The template-generated stream makes the gold state mechanically derivable: the benchmark's template
parser gives every key's value sequence. An arm exposes its current items as
``(key, value, attributed event indices)`` (:meth:`ArmBase.active_facts`); the events say which gold
key each item was written from. No model judges anything here.

- ``gold_in_active_cell``: the key's final value is the value of some current item.
- ``gold_in_matching_cell``: ... of a current item written from that key's own facts.
- ``stale_sibling`` (overwritten keys only): a current item written from the key's facts still holds
  one of its earlier values (a revision that became a separate cell instead of a supersession).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from pmem.bench import fact_key, normalize_answer, parse_fact

if TYPE_CHECKING:
    from pmem.bench import Event, Question


@dataclass(frozen=True)
class Gold:
    sequences: dict[str, list[str]]  # gold key -> values in arrival order
    event_key: dict[int, str]  # event index -> gold key


@lru_cache(maxsize=8)
def _gold_cached(lines: tuple[tuple[int, str], ...]) -> Gold:

    seqs: dict[str, list[str]] = defaultdict(list)
    event_key: dict[int, str] = {}
    for index, text in lines:
        parsed = parse_fact(text)
        if parsed is None:
            continue
        key = fact_key(parsed[0], parsed[1])
        seqs[key].append(parsed[2])
        event_key[index] = key
    return Gold(dict(seqs), event_key)


def gold_of(events: Sequence[Event]) -> Gold:
    return _gold_cached(tuple((e.index, e.text) for e in events))


def _norm(text: str) -> str:

    return normalize_answer(text)


def _index(
    facts: Sequence[tuple[str, str, frozenset[int]]], gold: Gold
) -> tuple[set[str], dict[str, set[str]]]:
    active = set()
    by_key: dict[str, set[str]] = defaultdict(set)
    for _key, value, events in facts:
        nv = _norm(value)
        active.add(nv)
        for e in events:
            k = gold.event_key.get(e)
            if k is not None:
                by_key[k].add(nv)
    return active, by_key


def _key_row(k: str, values: list[str], active: set[str], by_key: dict[str, set[str]]) -> dict[str, Any]:
    final = _norm(values[-1])
    earlier = {_norm(v) for v in values[:-1]} - {final}
    mine = by_key.get(k, set())
    row: dict[str, Any] = {
        "gold_in_active_cell": final in active,
        "gold_in_matching_cell": final in mine,
        "stale_sibling": bool(mine & earlier) if len(values) > 1 else None,
    }
    return row


class AuditIndex:
    """The audit's view of one store state: built once, asked per question."""

    def __init__(self, events: Sequence[Event], facts: Sequence[tuple[str, str, frozenset[int]]]) -> None:
        self.gold = gold_of(events)
        self.n_facts = len(facts)
        self.active, self.by_key = _index(facts, self.gold) if self.gold.sequences else (set(), {})

    def summary(self) -> dict[str, Any]:
        """Aggregate audit over every gold key of the stream (empty when the stream has none)."""
        seqs = self.gold.sequences
        if not seqs:
            return {}
        in_active = in_match = over = sibling = 0
        for k, values in seqs.items():
            row = _key_row(k, values, self.active, self.by_key)
            in_active += row["gold_in_active_cell"]
            in_match += row["gold_in_matching_cell"]
            if len(values) > 1:
                over += 1
                sibling += bool(row["stale_sibling"])
        n = len(seqs)
        return {
            "gold_keys": n,
            "overwritten_keys": over,
            "active_items": self.n_facts,
            "gold_in_active_cell": in_active / n,
            "gold_in_matching_cell": in_match / n,
            "stale_sibling_rate": sibling / over if over else 0.0,
        }

    def question(self, question: Question) -> dict[str, Any]:
        """Per-question columns: the gold answer among current items, and for a stale-scoreable question
        the audit of its key."""
        if not self.gold.sequences:
            return {}
        out: dict[str, Any] = {"gold_in_active_cell": any(_norm(g) in self.active for g in question.gold)}
        k = question.stale_key
        if k is not None and k in self.gold.sequences:
            row = _key_row(k, self.gold.sequences[k], self.active, self.by_key)
            out["gold_in_matching_cell"] = row["gold_in_matching_cell"]
            out["stale_sibling"] = row["stale_sibling"]
        return out


def audit_store(events: Sequence[Event], facts: Sequence[tuple[str, str, frozenset[int]]]) -> dict[str, Any]:
    """Aggregate audit over every gold key of the stream."""
    return AuditIndex(events, facts).summary()


def audit_question(
    events: Sequence[Event], facts: Sequence[tuple[str, str, frozenset[int]]], question: Question
) -> dict[str, Any]:
    return AuditIndex(events, facts).question(question)
