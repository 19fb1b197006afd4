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


@dataclass(frozen=True)
class History:
    id: str
    benchmark: str
    subset: str
    events: tuple[Event, ...]
    questions: tuple[Question, ...]
    params: dict[str, Any] = field(default_factory=dict)
