"""Name registries with plugins, shared by the packages that own a kind of name (arms, benchmarks).

A registry maps names to entries: built-in ones (fixed, defined by the owning package) and plugins
registered in this process. A ``module:attr`` name is a plugin too: it imports ``module`` and takes
``attr`` (a dotted path inside it), or, where the module has no such attribute, the plugin that
importing it registered under the name ``attr`` (arm names may contain ``-``, which no attribute can).
That object is an entry already (what registering returned) or a callable the owning package wraps
as one. Other processes (Ray workers) find a plugin only
through such a name, since it makes them import the module.

An entry may be :class:`Lazy`: a ``module:attr`` target imported on first use (:meth:`Registry.load`),
after the modules it ``needs`` (an optional dependency; one that is missing is a
:class:`MissingDependencyError` naming the ``extra`` that installs it). The model backends are such
entries, so that building the heuristic agent never imports Ray or scikit-learn.

>>> reg = Registry("thing", str, dict, lambda ref, fn: fn.__name__, "a class")
>>> reg.get("collections:OrderedDict")
'OrderedDict'
>>> reg.get("math:pi")
Traceback (most recent call last):
...
ValueError: plugin thing 'math:pi' is a float: give a class
>>> reg.get("nope")
Traceback (most recent call last):
...
ValueError: unknown thing 'nope' (known: none; or module:attr for a plugin)
>>> lazy = Registry("backend", Lazy, lambda: {"od": Lazy("collections:OrderedDict", "x", ("no_such_mod",))},
...                 lambda ref, obj: Lazy(ref), "a class")
>>> lazy.load("collections:OrderedDict").__name__
'OrderedDict'
>>> lazy.load("od")
Traceback (most recent call last):
...
pmem._plugins.MissingDependencyError: backend 'od' needs the package 'no_such_mod', which is missing: pip install 'pmem[x]'
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

E = TypeVar("E")
_MISSING = object()


class MissingDependencyError(ImportError):
    """An optional dependency is not installed; the message names the extra that installs it.

    (``pmem.models.MissingDependencyError``: the model backends raise it.)"""


@dataclass(frozen=True)
class Lazy:
    """An entry that stands for the object at ``target`` (``module:attr``), imported on first use.

    ``needs`` are top-level modules that must import first (an optional dependency), ``extra`` the
    ``pmem`` extra that installs them (None: a plain ``pip install -e .`` does)."""

    target: str
    extra: str | None = None
    needs: tuple[str, ...] = ()

    def load(self, what: str) -> Any:
        """The object, its ``needs`` imported first; ``what`` names the entry in the error."""
        for module in self.needs:
            try:
                importlib.import_module(module)
            except ImportError as exc:
                hint = f"pip install 'pmem[{self.extra}]'" if self.extra else "pip install -e ."
                msg = f"{what} needs the package {module!r}, which is missing: {hint}"
                raise MissingDependencyError(msg) from exc
        module_name, _, attr = self.target.partition(":")
        obj = _attribute(importlib.import_module(module_name), attr)
        if obj is _MISSING:
            msg = f"{what}: {module_name} has no attribute {attr!r}"
            raise AttributeError(msg)
        return obj


def _attribute(obj: Any, dotted: str) -> Any:
    """``obj.a.b`` for ``dotted`` ``"a.b"``, or ``_MISSING`` where a part is absent."""
    for part in dotted.split("."):
        obj = getattr(obj, part, _MISSING)
        if obj is _MISSING:
            break
    return obj


class Registry(Generic[E]):
    """Entries of type ``entry_type`` by name. ``builtin()`` gives the built-in ones (called on each
    lookup: the owner may build them lazily); ``from_callable(ref, fn)`` wraps a callable that a
    ``module:attr`` name points at; ``expects`` says what such a name must point at, for errors."""

    def __init__(
        self,
        what: str,
        entry_type: type[E],
        builtin: Callable[[], Mapping[str, E]],
        from_callable: Callable[[str, Callable[..., Any]], E],
        expects: str,
    ) -> None:
        self.what = what
        self._type = entry_type
        self._builtin = builtin
        self._from_callable = from_callable
        self._expects = expects
        self.plugins: dict[str, E] = {}
        #: ``module:attr`` names resolved so far (spellings of entries, not entries of their own)
        self._refs: dict[str, E] = {}

    def names(self) -> tuple[str, ...]:
        """Built-in names, then plugins registered in this process, in registration order."""
        return (*self._builtin(), *self.plugins)

    def known(self, name: str) -> E | None:
        """The entry of ``name`` if this process knows it already; never imports anything."""
        for table in (self._builtin(), self.plugins, self._refs):
            if name in table:
                return table[name]
        return None

    def add(self, name: str, entry: E) -> E:
        """Register (or replace) a plugin under a plain name."""
        if not isinstance(name, str) or not name or ":" in name or name.strip() != name:
            msg = f"{self.what} name {name!r}: give a non-empty name without ':' or surrounding spaces"
            raise ValueError(msg)
        if name in self._builtin():
            msg = f"{self.what} {name!r} is built in; register the plugin under another name"
            raise ValueError(msg)
        old = self.plugins.get(name)
        self.plugins[name] = entry
        # a re-registration (a reloaded module) replaces what the names that reached the old entry give
        for ref in [r for r, e in self._refs.items() if old is not None and e is old]:
            del self._refs[ref]
        return entry

    def get(self, name: str) -> E:
        """The entry of ``name``; a ``module:attr`` name is imported on first use.

        Raises ``ValueError`` naming the known names, or saying why a plugin does not load."""
        entry = self.known(name)
        if entry is not None:
            return entry
        if isinstance(name, str) and ":" in name:
            obj = self._load(name)
            if isinstance(obj, self._type):
                entry = obj
            elif callable(obj):
                entry = self._from_callable(name, obj)
            else:
                msg = f"plugin {self.what} {name!r} is a {type(obj).__name__}: give {self._expects}"
                raise ValueError(msg)
            self._refs[name] = entry
            return entry
        msg = f"unknown {self.what} {name!r} (known: {', '.join(self.names()) or 'none'}; or module:attr for a plugin)"
        raise ValueError(msg)

    def load(self, name: str) -> Any:
        """What the entry of ``name`` stands for: a :class:`Lazy` entry's object, imported now (a missing
        dependency is a :class:`MissingDependencyError` naming its extra); any other entry is itself."""
        entry = self.get(name)
        return entry.load(f"{self.what} {name!r}") if isinstance(entry, Lazy) else entry

    def _load(self, ref: str) -> Any:
        module, _, attr = ref.partition(":")
        if not module or not attr:
            msg = f"plugin {self.what} {ref!r}: give module:attr"
            raise ValueError(msg)
        try:
            obj: Any = importlib.import_module(module)
        except ImportError as exc:
            msg = f"cannot import {module!r} for plugin {self.what} {ref!r}: {exc}"
            raise ValueError(msg) from exc
        obj = _attribute(obj, attr)
        if obj is _MISSING:
            obj = self.plugins.get(attr, _MISSING)
        if obj is _MISSING:
            msg = f"plugin {self.what} {ref!r}: {module} has no attribute {attr!r} and registers no {self.what} of that name"
            raise ValueError(msg)
        return obj
