"""The runner's bindings to the packages below it: benchmarks, arms, models, prompts.

The runner meets those packages through their public names only (``pmem.bench``, ``pmem.arms``,
``pmem.models``, ``pmem.memory.prompts``: tests/test_public_seams.py holds it to that); the bindings
here are the calls that build things from them. Names, plugins
(``module:attr``) included, are resolved by the registries of the packages that own them: arms by
``pmem.arms``, benchmarks by ``pmem.bench``, model backends by ``pmem.models``. A model is built from
the :class:`pmem.models.ModelSpec` its role holds, the object itself (no dict in between).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from pmem.arms import make_arm as arm_registry_make
from pmem.bench import iter_histories, judge_messages
from pmem.bench import judge_verdict as bench_judge_verdict
from pmem.memory.prompts import prompt_hashes as template_hashes
from pmem.models import ResponseCache, make_chat_model, make_embedder

if TYPE_CHECKING:
    from pmem.arms import Arm, ModelSet
    from pmem.bench import History
    from pmem.models import ChatModel, Embedder
    from pmem.runner._config import RoleSpec, Target


def iter_target_histories(target: Target) -> Iterator[History]:
    """The histories of one sweep target, in the benchmark's order (``limit``: the first N).

    Built-in and plugin (``module:function``) benchmarks alike come from the benchmark registry."""
    it: Iterable[History] = iter_histories(target.benchmark, target.subset, **target.params_dict)
    if target.limit is not None:
        it = itertools.islice(it, target.limit)
    yield from it


def make_arm(name: str, models: ModelSet, options: dict[str, Any]) -> Arm:
    """A fresh arm from the arm registry (a ``module:attr`` plugin is imported on first use)."""
    return arm_registry_make(name, models, dict(options))


def prompt_hashes() -> dict[str, str]:
    """Hashes of the arms' prompt templates, for the config hash."""
    return {str(k): str(v) for k, v in sorted(template_hashes().items())}


def build_chat(spec: RoleSpec, cache: ResponseCache | None = None) -> ChatModel:
    """The chat model of a role (agent, judge), from its :class:`pmem.models.ModelSpec`."""
    return make_chat_model(spec.spec, cache=cache)


def build_embedder(spec: RoleSpec, cache: ResponseCache | None = None) -> Embedder:
    """The embedder of the ``embedder`` role, from its :class:`pmem.models.ModelSpec`."""
    return make_embedder(spec.spec, cache=cache)


def open_cache(path: str | None) -> ResponseCache | None:
    """The model layer's response cache at ``path`` (None when caching is off)."""
    if not path:
        return None
    return ResponseCache(path)


def judge_prompt(question: Any, prediction: str, benchmark: str = "longmemeval") -> list[dict[str, str]]:
    """The benchmark's judge prompt for one answered question (LongMemEval's per-type rules, LoCoMo's J)."""
    return judge_messages(
        question.qtype, question.id, question.text, " | ".join(question.gold), prediction, benchmark=benchmark
    )


def judge_verdict(text: str) -> bool:
    return bool(bench_judge_verdict(text))
