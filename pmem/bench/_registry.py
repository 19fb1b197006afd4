"""The benchmark registry: every benchmark's name, subsets, parameters (with types) and iterator.

This is the one list of benchmarks: ``pmem bench list`` prints it, the runner validates sweep configs
against it (subset names, parameter names and types) and iterates histories through it.

Names (contract): ``alfworld-revision`` (subsets chains [L], retraction [d], conflict, two-step [L]),
``factconsolidation`` (sh_6k ... mh_262k), ``locomo`` (locomo10; sessions, questions,
conversations), ``longmemeval`` (oracle, s; ``ku=True`` or the aliases
``oracle-ku`` / ``s-ku`` select the knowledge-update questions), ``provenance-probes`` (erasure,
authority, late-arrival, stale-premise, merge).

Plugins go through the same registry: ``register_benchmark(name, iterate, ...)`` adds one in this
process, and a ``module:attr`` name imports ``module`` and takes ``attr``: a :class:`BenchmarkInfo` that
``register_benchmark`` returned, or a function ``iterate(subset=..., **params) -> Iterable[History]``
(any subset, ``default`` when none is named; any scalar parameters).

>>> h = next(iter_histories("alfworld-revision", "chains", L=4))
>>> h.id, h.questions[0].qtype
('alfworld-revision/chains/L4/case000', 'current')
>>> benchmark_info("alfworld-revision").params["L"].__name__
'int'
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from pmem._plugins import Registry
from pmem.bench import _alfworld, _factconsolidation, _locomo, _longmemeval, _probes
from pmem.bench._alfworld import iter_alfworld
from pmem.bench._factconsolidation import build_history, cut_history
from pmem.bench._locomo import iter_locomo
from pmem.bench._longmemeval import iter_longmemeval
from pmem.bench._probes import iter_probes
from pmem.bench._scoring import Score, score_question
from pmem.bench._types import History, Question

#: ``iterate(subset=..., **params)``: the histories of one subset, in a stable order
Iterate = Callable[..., Iterable[History]]


def _no_iterator(subset: str, **params: Any) -> Iterable[History]:
    msg = "this benchmark entry has no iterator"
    raise NotImplementedError(msg)


@dataclass(frozen=True)
class BenchmarkInfo:
    """One registered benchmark."""

    name: str
    #: the subsets ``pmem bench list`` shows and a run of every subset iterates; empty: any name goes
    subsets: tuple[str, ...]
    source: str = ""
    #: the parameters a config may set, with their types; None: any scalar parameters (a plain plugin)
    params: Mapping[str, type] | None = field(default_factory=lambda: MappingProxyType({}))
    description: str = ""
    #: further subset names accepted: selections of the listed subsets (LongMemEval's ``oracle-ku``)
    aliases: tuple[str, ...] = ()
    #: the subset a config that names none runs; None: a config must name its subsets
    default_subset: str | None = None
    iterate: Iterate = field(default=_no_iterator, repr=False, compare=False)

    @property
    def accepted_subsets(self) -> tuple[str, ...]:
        """Every subset name a config may give (empty: any)."""
        return (*self.subsets, *self.aliases)

    def accepts(self, subset: str) -> bool:
        return not self.subsets or subset in self.accepted_subsets


def _alfworld_iter(subset: str, **params: Any) -> Iterator[History]:

    return iter_alfworld(subset, **params)


def _fc_iter(subset: str, **params: Any) -> Iterator[History]:

    unknown = sorted(set(params) - {"events", "questions"})
    if unknown:
        msg = (
            f"factconsolidation takes only 'events' and 'questions' (got {unknown}); choose a subset instead"
        )
        raise TypeError(msg)
    history = build_history(subset)
    if params:
        history = cut_history(history, events=params.get("events"), questions=params.get("questions"))
    yield history


def _probes_iter(subset: str, **params: Any) -> Iterator[History]:

    return iter_probes(subset, **params)


def _locomo_iter(subset: str, **params: Any) -> Iterator[History]:

    return iter_locomo(subset, **params)


def _lme_iter(subset: str, **params: Any) -> Iterator[History]:

    if subset.endswith("-ku"):
        subset, params = subset.removesuffix("-ku"), {**params, "ku": True}
    return iter_longmemeval(subset, **params)


@functools.cache
def _builtin() -> dict[str, BenchmarkInfo]:
    # built on first use: the subset lists live next to each benchmark's loader

    infos = (
        BenchmarkInfo(
            "alfworld-revision",
            _alfworld.SUBSETS,
            _alfworld.SOURCE,
            MappingProxyType({"L": int, "d": int, "cases": int, "seed": int}),
            "revision chains, retraction and conflict probes over object locations",
            iterate=_alfworld_iter,
        ),
        BenchmarkInfo(
            "factconsolidation",
            _factconsolidation.SUBSETS,
            _factconsolidation.SOURCE,
            MappingProxyType({"events": int, "questions": int}),
            "MemoryAgentBench conflict resolution: numbered fact stream, 100 questions",
            iterate=_fc_iter,
        ),
        BenchmarkInfo(
            "locomo",
            _locomo.SUBSETS,
            _locomo.SOURCE,
            MappingProxyType({"sessions": int, "questions": int, "conversations": str, "gold": str}),
            "very long two-person conversations (LoCoMo): official F1, BLEU-1 and an LLM judge per category",
            default_subset=_locomo.SUBSETS[0],
            iterate=_locomo_iter,
        ),
        BenchmarkInfo(
            "longmemeval",
            _longmemeval.SUBSETS,
            _longmemeval.SOURCE,
            MappingProxyType(
                {
                    "path": str,
                    "ku": bool,
                    "answer_class": str,
                    "answer_classes": str,
                    "expected_sha256": str,
                    "verify": bool,
                }
            ),
            "chat-history QA judged by an LLM; knowledge-update and answer-class selections",
            aliases=tuple(f"{s}-ku" for s in _longmemeval.SUBSETS),
            iterate=_lme_iter,
        ),
        BenchmarkInfo(
            "provenance-probes",
            _probes.SUBSETS,
            _probes.SOURCE,
            MappingProxyType({"cases": int, "seed": int}),
            "erasure, source authority, late arrival, stale premises and wrong merges",
            iterate=_probes_iter,
        ),
    )
    return {info.name: info for info in infos}


_REGISTRY: Registry[BenchmarkInfo] = Registry(
    "benchmark",
    BenchmarkInfo,
    _builtin,
    lambda ref, iterate: BenchmarkInfo(ref, (), params=None, default_subset="default", iterate=iterate),
    "a BenchmarkInfo (what register_benchmark returns) or a function iterate(subset=..., **params)",
)


def register_benchmark(
    name: str,
    iterate: Iterate,
    *,
    subsets: Iterable[str] = (),
    params: Mapping[str, type] | None = None,
    source: str = "",
    description: str = "",
    default_subset: str | None = None,
) -> BenchmarkInfo:
    """Add (or replace) a plugin benchmark; returns its entry, which a ``module:attr`` name may point at.

    ``iterate(subset=..., **params)`` yields the histories of one subset. ``subsets`` lists the subset
    names a config may give (empty: any); ``params`` the parameters and their types (None: any scalars).
    """
    if not callable(iterate):
        msg = f"benchmark {name!r}: iterate must be callable as iterate(subset=..., **params)"
        raise TypeError(msg)
    info = BenchmarkInfo(
        name,
        tuple(subsets),
        source,
        None if params is None else MappingProxyType(dict(params)),
        description,
        default_subset=default_subset,
        iterate=iterate,
    )
    return _REGISTRY.add(name, info)


def benchmark_names() -> tuple[str, ...]:
    """Every registered benchmark: the built-in ones, then plugins registered in this process."""
    return _REGISTRY.names()


def benchmark_info(name: str) -> BenchmarkInfo:
    """The entry of a registered name or of a ``module:attr`` plugin name (imported on first use)."""
    return _REGISTRY.get(name)


def list_benchmarks() -> list[BenchmarkInfo]:
    return [benchmark_info(name) for name in benchmark_names()]


@dataclass(frozen=True)
class Benchmark:
    """A benchmark bound to its parameters (``seed``, ``path``...): iterate histories, score answers."""

    info: BenchmarkInfo
    params: dict[str, Any]

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def subsets(self) -> tuple[str, ...]:
        return self.info.subsets

    def histories(self, subset: str | None = None, **params: Any) -> Iterator[History]:
        if subset is not None:
            subsets: tuple[str, ...] = (subset,)
        else:
            subsets = self.subsets or ((self.info.default_subset,) if self.info.default_subset else ())
        for s in subsets:
            yield from self.info.iterate(subset=s, **{**self.params, **params})

    def score(self, question: Question, prediction: str) -> Score:
        return score_question(self.name, question, prediction)


def load_benchmark(name: str, **params: Any) -> Benchmark:
    return Benchmark(benchmark_info(name), dict(params))


def iter_histories(name: str, subset: str | None = None, **params: Any) -> Iterator[History]:
    """Histories of one subset (all subsets when None), in a stable order."""
    return load_benchmark(name, **params).histories(subset)
