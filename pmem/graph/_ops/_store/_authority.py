"""Source authority: each source's level now, every setting in order, the default level."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pmem.graph._ops._store._arrays import restore_columns


class Authority:
    """Source levels; not configured (``levels`` None) behaves exactly as before there was any.

    >>> authority = Authority()
    >>> authority.set("boss", 2, after=-1)
    >>> authority.level("boss"), authority.level("intern"), authority.configured()
    (2, 1, True)
    """

    def __init__(self) -> None:
        self.levels: dict[str, int] | None = None  # source -> level now
        self.history: list[tuple[int, str, int]] = []  # (after seq, source, level); seq -1: initial
        self.default_level = 1
        self.from_start = False  # configured by the graph's constructor (maybe empty)

    def configure(self, default: int, from_start: bool) -> None:
        """Rank unlisted sources at ``default``; ``from_start``: the constructor configured authority
        (maybe empty), which a saved state records."""
        self.default_level = default
        self.from_start = from_start
        if from_start:
            self.levels = {}

    def set(self, source: str, level: int, after: int) -> None:
        """Rank ``source`` at ``level`` from after seq ``after`` (-1: from the start)."""
        if self.levels is None:
            self.levels = {}
        self.levels[source] = level
        self.history.append((after, source, level))

    def load(self, config: dict[str, Any]) -> None:
        """Set source authority as :meth:`config` gave it."""
        self.default_level = int(config["default"])
        self.from_start = bool(config["from_start"])
        if config["configured"]:
            self.levels = {}
            for after, source, level in config["settings"]:
                self.levels[source] = int(level)
                self.history.append((int(after), str(source), int(level)))

    def restore(self, columns: Mapping[str, Any]) -> None:
        """Set the fields of :data:`COLUMNS` that ``columns`` holds."""
        restore_columns(self, COLUMNS, columns)

    def configured(self) -> bool:
        """Whether source authority is configured (else every source ranks the same)."""
        return self.levels is not None

    def ranked(self) -> Mapping[str, int]:
        """The sources given a level, and their levels now (read-only)."""
        return self.levels or {}

    def level(self, source: str) -> int:
        """The level ``source`` ranks at now (the default when unlisted or not configured)."""
        return (self.levels or {}).get(source, self.default_level)

    def default(self) -> int:
        return self.default_level

    def initial(self) -> dict[str, int] | None:
        """The source levels the graph was constructed with; None when it was not given any."""
        if not self.from_start:
            return None
        return {source: level for after, source, level in self.history if after < 0}

    def settings(self) -> list[tuple[int, str, int]]:
        """Every setting made after construction: (after seq, source, level), in order."""
        return [s for s in self.history if s[0] >= 0]

    def config(self) -> dict[str, Any]:
        """As a state records it: configured, from the start, the default level, and every setting
        (after seq, source, level) in order."""
        return {
            "configured": self.levels is not None,
            "from_start": self.from_start,
            "default": self.default_level,
            "settings": [list(s) for s in self.history],
        }


#: the group's fields
COLUMNS = frozenset(vars(Authority()))
