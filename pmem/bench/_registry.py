"""The benchmark registry: ``load_benchmark(name, **params)`` and ``iter_histories(name, subset, ...)``.

Names (contract): ``alfworld-revision`` (subsets chains [L], retraction [d], conflict, two-step [L]),
``factconsolidation`` (sh_6k ... mh_262k), ``longmemeval`` (oracle, s; ``ku=True`` or the aliases
``oracle-ku`` / ``s-ku`` select the knowledge-update questions).

>>> h = next(iter_histories("alfworld-revision", "chains", L=4))
>>> h.id, h.questions[0].qtype
('alfworld-revision/chains/L4/case000', 'current')
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from pmem.bench._scoring import Score, score_question
from pmem.bench._types import History, Question


@dataclass(frozen=True)
class BenchmarkInfo:
    name: str
    subsets: tuple[str, ...]
    source: str
    params: tuple[str, ...]
    description: str


def _alfworld_iter(subset: str, **params: Any) -> Iterator[History]:
    from pmem.bench._alfworld import iter_alfworld

    return iter_alfworld(subset, **params)


def _fc_iter(subset: str, **params: Any) -> Iterator[History]:
    from pmem.bench._factconsolidation import build_history

    if params:
        msg = f"factconsolidation takes no parameters (got {sorted(params)}); choose a subset instead"
        raise TypeError(msg)
    yield build_history(subset)


def _lme_iter(subset: str, **params: Any) -> Iterator[History]:
    from pmem.bench._longmemeval import iter_longmemeval

    if subset.endswith("-ku"):
        subset, params = subset.removesuffix("-ku"), {**params, "ku": True}
    return iter_longmemeval(subset, **params)


def _infos() -> dict[str, tuple[BenchmarkInfo, Callable[..., Iterator[History]]]]:
    from pmem.bench import _alfworld, _factconsolidation, _longmemeval

    return {
        "alfworld-revision": (
            BenchmarkInfo("alfworld-revision", _alfworld.SUBSETS, _alfworld.SOURCE, ("seed", "cases", "L", "d"),
                          "revision chains, retraction and conflict probes over object locations"),
            _alfworld_iter,
        ),
        "factconsolidation": (
            BenchmarkInfo("factconsolidation", _factconsolidation.SUBSETS, _factconsolidation.SOURCE, (),
                          "MemoryAgentBench conflict resolution: numbered fact stream, 100 questions"),
            _fc_iter,
        ),
        "longmemeval": (
            BenchmarkInfo("longmemeval", _longmemeval.SUBSETS, _longmemeval.SOURCE,
                          tuple(p for p in inspect.signature(_longmemeval.iter_longmemeval).parameters
                                if p != "subset"),
                          "chat-history QA judged by an LLM; knowledge-update and answer-class selections"),
            _lme_iter,
        ),
    }


def list_benchmarks() -> list[BenchmarkInfo]:
    return [info for info, _ in _infos().values()]


def _lookup(name: str) -> tuple[BenchmarkInfo, Callable[..., Iterator[History]]]:
    infos = _infos()
    if name not in infos:
        msg = f"unknown benchmark {name!r} (known: {', '.join(infos)})"
        raise ValueError(msg)
    return infos[name]


@dataclass(frozen=True)
class Benchmark:
    """A benchmark bound to its parameters (``seed``, ``path``...): iterate histories, score answers."""

    info: BenchmarkInfo
    params: dict[str, Any]
    _iter: Callable[..., Iterator[History]]

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def subsets(self) -> tuple[str, ...]:
        return self.info.subsets

    def histories(self, subset: str | None = None, **params: Any) -> Iterator[History]:
        for s in (subset,) if subset is not None else self.subsets:
            yield from self._iter(s, **{**self.params, **params})

    def score(self, question: Question, prediction: str) -> Score:
        return score_question(self.name, question, prediction)


def load_benchmark(name: str, **params: Any) -> Benchmark:
    info, it = _lookup(name)
    return Benchmark(info, dict(params), it)


def iter_histories(name: str, subset: str | None = None, **params: Any) -> Iterator[History]:
    """Histories of one subset (all subsets when None), in a stable order."""
    return load_benchmark(name, **params).histories(subset)
