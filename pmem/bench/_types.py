"""The one shape every benchmark yields: histories of ordered events plus the questions asked.

A question is asked after the event with index ``after_event`` has been ingested (``-1``: before any
event; ``len(events) - 1``: after the whole stream), so probes can ask between events.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Event:
    index: int
    text: str
    time: str | None = None
    source: str = "user"
    session_id: str | None = None
    role: str | None = None
    #: when what the event states became true (ISO 8601), where the benchmark says; ``time`` is when
    #: it was observed
    valid_time: str | None = None
    #: the benchmark's own id of the turn (LoCoMo's ``dia_id``, "D1:3"): what a citation of it names
    turn_id: str | None = None

    @property
    def speaker(self) -> str:
        """Who said it: the dialogue role or speaker where there is one, else the source."""
        return self.role or self.source or "user"


@dataclass(frozen=True)
class Question:
    id: str
    text: str
    gold: tuple[str, ...]
    qtype: str
    after_event: int
    stale: tuple[str, ...] = ()
    params: dict[str, Any] = field(default_factory=dict)
    needs_judge: bool = False
    question_date: str | None = None
    answer_class: str | None = None
    #: How ``gold`` and ``stale`` decide ``correct`` (:func:`pmem.bench.score_question`): "any": one gold
    #: value suffices; "all": every gold value must be given (a conflict before settling); "only": a gold
    #: value and no stale one; "absent": no stale value (gold is empty: an erased fact must not leak);
    #: "flagged": "only", or the answer flags itself as possibly out of date (a changed premise).
    match: str = "any"
    #: The fact key whose earlier values are ``stale`` (FactConsolidation, ALFWorld-Revision).
    stale_key: str | None = None

    @property
    def alt_gold(self) -> tuple[str, str] | None:
        """The question's other gold as (kind, answer), where its benchmark has two that differ
        (LoCoMo's original and audited answers: ``params["alt_gold"]``); None otherwise."""
        alt = self.params.get("alt_gold") if self.params else None
        if not isinstance(alt, dict) or not alt.get("answer"):
            return None
        return str(alt.get("kind") or "other"), str(alt["answer"])


@dataclass(frozen=True)
class History:
    id: str
    benchmark: str
    subset: str
    events: tuple[Event, ...]
    questions: tuple[Question, ...]
    params: dict[str, Any] = field(default_factory=dict)
