"""Whose memory a call is about: a namespace (``user_id``, optionally ``agent_id`` and ``run_id``), its
own state in the store, reachable by no other namespace's calls.

Ids are checked, never trusted: each is 1 to 128 characters of ASCII letters, digits and ``. _ @ + -``,
starting with a letter or digit, so no id can name a path (``../``, ``/etc``), hide a control character
(NUL) or pass for another id (a Cyrillic ``а`` for a Latin ``a``: refused, not folded). The folder of a
namespace is the SHA-256 of its ids, so that no two namespaces share one even on a file system that folds
case, and nothing a caller sends reaches the file system at all.

>>> ns = Namespace.of("alice", agent_id="planner")
>>> ns.label, len(ns.folder)
('alice/planner', 64)
>>> try:
...     Namespace.of("../etc")
... except NamespaceError as exc:
...     print(exc)
user_id '../etc': an id is 1 to 128 characters of ASCII letters, digits and . _ @ + -, starting with a letter or digit
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

#: What an id may be (see the module docstring).
ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+-]{0,127}")
_ID_RULE = (
    "an id is 1 to 128 characters of ASCII letters, digits and . _ @ + -, starting with a letter or digit"
)


class NamespaceError(ValueError):
    """An id that names no namespace, or a namespace the caller may not reach: the message says which."""


def _checked(field: str, value: object) -> str:
    if not isinstance(value, str) or not ID_PATTERN.fullmatch(value):
        shown = repr(value) if not isinstance(value, str) or len(value) <= 40 else repr(value[:40]) + "..."
        msg = f"{field} {shown}: {_ID_RULE}"
        raise NamespaceError(msg)
    return value


@dataclass(frozen=True)
class Namespace:
    """One memory of the store: a user's, or one agent's or run's of a user's."""

    user_id: str
    agent_id: str | None = None
    run_id: str | None = None

    @classmethod
    def of(cls, user_id: object, agent_id: object = None, run_id: object = None) -> Namespace:
        """The namespace of these ids, each checked (:class:`NamespaceError` names the one refused).
        An empty ``agent_id`` or ``run_id`` is none."""
        return cls(
            _checked("user_id", user_id),
            None if agent_id in (None, "") else _checked("agent_id", agent_id),
            None if run_id in (None, "") else _checked("run_id", run_id),
        )

    @property
    def label(self) -> str:
        """``user[/agent][/run:id]``, as messages and listings name it."""
        parts = [self.user_id]
        if self.agent_id is not None:
            parts.append(self.agent_id)
        if self.run_id is not None:
            parts.append(f"run:{self.run_id}")
        return "/".join(parts)

    @property
    def folder(self) -> str:
        """The folder name of this namespace's state in the store (hex SHA-256 of its ids)."""
        ids = "\x00".join((self.user_id, self.agent_id or "", self.run_id or ""))
        return hashlib.sha256(ids.encode()).hexdigest()

    def ids(self) -> dict[str, str | None]:
        """The ids, as a namespace's record in the store keeps them."""
        return {"user_id": self.user_id, "agent_id": self.agent_id, "run_id": self.run_id}
