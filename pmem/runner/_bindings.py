"""Where the runner meets the packages below it: benchmarks, arms, models.

Each binding imports its package lazily and tolerates optional parts (a prompt-hash function the
arms package may not expose). ``module:attr`` names in a config load plugins: a benchmark function
``f(subset=..., **params) -> Iterable[History]`` or an arm factory ``f(models, options) -> Arm``.
"""

from __future__ import annotations

import importlib
import itertools
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pmem.arms._base import Arm, ModelSet
    from pmem.bench._types import History
    from pmem.runner._config import ModelSpec, Target


def load_object(ref: str) -> Any:
    module, _, attr = ref.partition(":")
    try:
        obj: Any = importlib.import_module(module)
    except ImportError as exc:
        msg = f"cannot import {module!r} for plugin {ref!r}: {exc}"
        raise ValueError(msg) from exc
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError as exc:
            msg = f"plugin {ref!r}: {module} has no attribute {attr!r}"
            raise ValueError(msg) from exc
    return obj


def _bench_call(name: str, subset: str, params: dict[str, Any]) -> Iterable[History]:
    from pmem.bench import iter_histories

    return iter_histories(name, subset, **params)


def iter_target_histories(target: Target) -> Iterator[History]:
    """The histories of one sweep target, in the benchmark's order (``limit``: the first N)."""
    params = target.params_dict
    if ":" in target.benchmark:
        fn = load_object(target.benchmark)
        it: Iterable[History] = fn(subset=target.subset, **params)
    else:
        it = _bench_call(target.benchmark, target.subset, params)
    if target.limit is not None:
        it = itertools.islice(it, target.limit)
    yield from it


def make_arm(name: str, models: ModelSet, options: dict[str, Any]) -> Arm:
    if ":" in name:
        factory = load_object(name)
        return factory(models, dict(options))
    from pmem import arms

    fn = getattr(arms, "make_arm", None)
    if fn is None:
        msg = f"arm {name!r}: pmem.arms has no make_arm() in this build"
        raise ValueError(msg)
    return fn(name, models, dict(options))


def prompt_hashes() -> dict[str, str]:
    """Hashes of the arms' prompt templates, for the config hash; empty when the arms expose none."""
    try:
        arms = importlib.import_module("pmem.arms")
    except ImportError:
        return {}
    for attr in ("prompt_hashes", "template_hashes", "PROMPT_HASHES"):
        obj = getattr(arms, attr, None)
        if obj is None:
            continue
        value = obj() if callable(obj) else obj
        if isinstance(value, dict):
            return {str(k): str(v) for k, v in sorted(value.items())}
        if isinstance(value, str):
            return {"all": value}
    return {}


def build_chat(spec: ModelSpec, cache: Any = None) -> Any:
    from pmem.models._registry import make_chat_model

    return make_chat_model(spec.as_dict(), cache=cache)


def build_embedder(spec: ModelSpec, cache: Any = None) -> Any:
    from pmem.models._registry import make_embedder

    return make_embedder(spec.as_dict(), cache=cache)


def open_cache(path: str | None) -> Any:
    """The model layer's response cache at ``path`` (None when caching is off or unavailable)."""
    if not path:
        return None
    try:
        mod = importlib.import_module("pmem.models._cache")
    except ImportError:
        return None
    cls = getattr(mod, "ResponseCache", None)
    return None if cls is None else cls(path)


def judge_prompt(question: Any, prediction: str) -> list[dict[str, str]]:
    """The benchmark's judge prompt for one answered question (LongMemEval's per-type rules)."""
    from pmem.bench import judge_messages

    return judge_messages(question.qtype, question.id, question.text, " | ".join(question.gold), prediction)


def judge_verdict(text: str) -> bool:
    from pmem.bench import judge_verdict as verdict

    return bool(verdict(text))
