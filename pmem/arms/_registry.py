"""The arm registry: every arm's name, factory, fixed options, display label and display order.

This is the one list of arms. The runner validates configs against it, the runners build arms from
it, and the report orders arms by it. Adding an arm is one line in :data:`_BUILTIN`.

Plugins go through the same registry, in two ways:

- ``register_arm(name, factory, ...)`` adds an arm in this process (a notebook, a test, a module that
  registers its arms when imported);
- a ``module:attr`` name (in a sweep config, say) imports ``module`` and takes ``attr``: an
  :class:`ArmEntry` that ``register_arm`` returned, a factory ``(models, options) -> Arm``, or the name
  of an arm the import registered. Ray runners are other processes: they find a plugin arm only through
  such a name, which makes each of them import the module.

>>> resolve_arm("pmem-iterative").options["read"]
'iterative'
>>> sort_arms(["raw", "zeta", "pmem"])
['pmem', 'raw', 'zeta']
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from pmem._plugins import Registry

if TYPE_CHECKING:
    from pmem.arms._base import Arm, ModelSet

#: ``factory(models, options) -> Arm``: what a plugin provides.
ArmFactory = Callable[["ModelSet", dict[str, Any]], "Arm"]

#: The built-in arms in display order (DESIGN.md's list, ``pmem-paper`` next to the other P-Mem variants):
#: name, ``module:class`` in ``pmem.arms`` (the
#: class is called as ``cls(name, models, options)``), and the options fixed for that name (a config's
#: ``[arm_options.NAME]`` cannot override them).
_BUILTIN: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("pmem", "_pmem:PMemArm", {}),
    ("pmem-iterative", "_pmem:PMemArm", {"read": "iterative"}),
    ("pmem-turn-prune", "_pmem:PMemArm", {"read": "turns"}),
    ("pmem-no-retention", "_pmem:PMemArm", {"retention": False}),
    ("pmem-no-identity", "_pmem:PMemArm", {"identity": False}),
    ("pmem-oracle", "_pmem:PMemArm", {"write": "oracle"}),
    ("pmem-paper", "_pmem:PMemArm", {"provenance": False}),
    ("no-memory", "_baselines:NoMemoryArm", {}),
    ("long-context", "_baselines:LongContextArm", {}),
    ("raw", "_baselines:RawArm", {}),
    ("raw-ordered", "_baselines:RawArm", {"ordered": True}),
    ("chunks", "_baselines:ChunksArm", {}),
    ("crud", "_baselines:CrudArm", {}),
    ("add-only", "_baselines:AddOnlyArm", {}),
    ("bitemporal", "_baselines:BitemporalArm", {}),
)

#: Every built-in arm name, in display order (what ``arms = ["all"]`` runs).
ARM_NAMES: tuple[str, ...] = tuple(name for name, _, _ in _BUILTIN)

#: Built-in variants that are not part of ``all`` (nor of DESIGN.md's list): name, ``module:class``, fixed
#: options. ``long-context-recent``: long context held to the sweep's read budget (its most recent turns).
VARIANT_ARMS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("long-context-recent", "_baselines:LongContextArm", {"recent": True}),
)

#: Their names.
VARIANT_ARM_NAMES: tuple[str, ...] = tuple(name for name, _, _ in VARIANT_ARMS)

#: The real peer libraries as arms (:mod:`pmem.peers`): name, ``module:class``, and the extra that installs
#: the library. Known by name like the built-in arms, listed after them, never part of ``all`` (each
#: needs its extra and a real model).
PEER_ARMS: tuple[tuple[str, str, str], ...] = (
    ("mem0", "pmem.peers._mem0:Mem0Arm", "mem0"),
    ("graphiti", "pmem.peers._graphiti:GraphitiArm", "graphiti"),
)
#: Their names.
PEER_ARM_NAMES: tuple[str, ...] = tuple(name for name, _, _ in PEER_ARMS)
#: Why an arm that needs a model (:attr:`ArmEntry.needs_model`) is not run with the heuristic agent.
NEEDS_A_MODEL = (
    "needs a model: it sends its own prompts, which the deterministic heuristic agent does not read "
    "(give [models.agent] a real model, e.g. jobs/cpu_llm.toml)"
)


@dataclass(frozen=True)
class ArmEntry:
    """One registered arm. ``make`` builds a fresh instance (one per history)."""

    name: str
    factory: ArmFactory = field(repr=False, compare=False)
    #: options fixed for this name: merged over the user's options
    options: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    #: what a report or listing shows for the arm (the name unless a plugin says otherwise)
    label: str = ""
    #: display position: lower first; built-in arms are 0, 1, 2 ... in DESIGN.md's order
    order: float = 0.0
    #: ``module:attr`` of the factory, for listings
    target: str = ""
    builtin: bool = False
    #: the optional dependency set the arm needs (``pip install 'pmem[EXTRA]'``), empty for none
    extra: str = ""
    #: whether the arm needs a real model: with the heuristic agent a sweep plans it as not run
    needs_model: bool = False

    def make(self, models: ModelSet, options: Mapping[str, Any] | None = None) -> Arm:
        return self.factory(models, {**dict(options or {}), **self.options})


def _builtin_factory(name: str, target: str) -> ArmFactory:
    module, cls = target.split(":")

    def factory(models: ModelSet, options: dict[str, Any]) -> Arm:
        # imported on first use: `import pmem.arms` stays cheap (the report only needs names)
        klass = getattr(importlib.import_module(module), cls)
        return klass(name, models, options)

    return factory


def _builtin_entries() -> dict[str, ArmEntry]:
    """The built-in arms in display order: P-Mem and the baselines, the ablation variants, then the peer
    libraries (their targets are whole module paths, an extra installs them, and they need a model)."""
    ours = [
        (name, f"pmem.arms.{target}", fixed, name, "", False)
        for name, target, fixed in (*_BUILTIN, *VARIANT_ARMS)
    ]
    peers = [
        (name, target, dict[str, Any](), f"{name} (the library)", extra, True)
        for name, target, extra in PEER_ARMS
    ]
    return {
        name: ArmEntry(
            name,
            _builtin_factory(name, target),
            MappingProxyType(dict(fixed)),
            label,
            float(i),
            target,
            builtin=True,
            extra=extra,
            needs_model=needs_model,
        )
        for i, (name, target, fixed, label, extra, needs_model) in enumerate([*ours, *peers])
    }


_BUILTIN_ENTRIES: dict[str, ArmEntry] = _builtin_entries()


def _target_of(factory: Any) -> str:
    module = getattr(factory, "__module__", None) or "?"
    return f"{module}:{getattr(factory, '__qualname__', type(factory).__name__)}"


def _next_order() -> float:
    return max(resolve_arm(n).order for n in _REGISTRY.names()) + 1


_REGISTRY: Registry[ArmEntry] = Registry(
    "arm",
    ArmEntry,
    lambda: _BUILTIN_ENTRIES,
    lambda ref, factory: ArmEntry(ref, factory, MappingProxyType({}), ref, _next_order(), ref),
    "an ArmEntry (what register_arm returns) or a factory (models, options) -> Arm",
)


def register_arm(
    name: str,
    factory: ArmFactory,
    *,
    options: Mapping[str, Any] | None = None,
    label: str | None = None,
    order: float | None = None,
) -> ArmEntry:
    """Add (or replace) a plugin arm; returns its entry, which a ``module:attr`` name may point at.

    ``factory(models, options)`` builds the arm; ``options`` are fixed for this name; ``order`` places it
    among the others (built-in arms are 0, 1, 2 ...; default: after every arm registered so far).
    Built-in names cannot be replaced, ``all`` means every built-in arm in a config, and ``:`` is reserved
    for ``module:attr`` names.
    """
    if name == "all":
        msg = "arm name 'all' is reserved (a config's arms = ['all'] runs every built-in arm)"
        raise ValueError(msg)
    if not callable(factory):
        msg = f"arm {name!r}: the factory must be callable as factory(models, options), got {factory!r}"
        raise TypeError(msg)
    entry = ArmEntry(
        name,
        factory,
        MappingProxyType(dict(options or {})),
        label or name,
        _next_order() if order is None else float(order),
        _target_of(factory),
    )
    return _REGISTRY.add(name, entry)


def resolve_arm(name: str) -> ArmEntry:
    """The entry of a registered name or of a ``module:attr`` plugin name (imported on first use).

    Raises ``ValueError`` naming the known arms, or saying why a plugin does not load."""
    return _REGISTRY.get(name)


def arm_names() -> tuple[str, ...]:
    """Every registered arm (built-in, then plugins registered in this process), in display order."""
    return tuple(sorted(_REGISTRY.names(), key=lambda n: resolve_arm(n).order))


def make_arm(name: str, models: ModelSet, options: Mapping[str, Any] | None = None) -> Arm:
    """A fresh arm (one per history). ``options`` are the arm's ``[arm_options.NAME]`` table."""
    return resolve_arm(name).make(models, options)


def arm_label(name: str) -> str:
    """What to show for an arm: its registered label, else the name itself."""
    entry = _REGISTRY.known(name)  # never imports: the report reads files, not modules
    return entry.label if entry is not None else name


def sort_arms(names: Iterable[str]) -> list[str]:
    """``names`` without repeats in display order; arms this process does not know come last, by name."""

    def key(n: str) -> tuple[float, str]:
        entry = _REGISTRY.known(n)
        return (entry.order if entry is not None else float("inf"), n)

    return sorted(dict.fromkeys(names), key=key)
