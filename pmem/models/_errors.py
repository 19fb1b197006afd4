"""Errors of the model layer."""

from __future__ import annotations

from typing import TYPE_CHECKING

#: an optional dependency of a backend is not installed; the message names the extra (defined with the
#: registries' lazy entries, which raise it)
from pmem._plugins import MissingDependencyError

if TYPE_CHECKING:
    from pmem.models._types import Attempt

__all__ = ["MissingDependencyError", "ModelCallError", "one_line"]


class ModelCallError(RuntimeError):
    """A model call failed for good (after its retries). ``endpoint`` names the URL that failed.

    ``failover`` is true when the endpoint itself looked down (connection refused or dropped, timeout,
    5xx), so a router may retry the call on another replica. ``attempts`` are the HTTP requests the call
    made, each with its status and error (the request log writes one row per attempt). ``overflow`` is
    true when the prompt did not fit the model's context: the question fails, not the history.
    """

    def __init__(
        self,
        message: str,
        *,
        endpoint: str | None = None,
        failover: bool = False,
        attempts: tuple[Attempt, ...] = (),
        overflow: bool = False,
    ) -> None:
        super().__init__(message)
        self.endpoint = endpoint
        self.failover = failover
        self.attempts = attempts
        self.overflow = overflow


def one_line(exc: BaseException) -> str:
    """What a command prints of ``exc``: its message's first line (a replica's start error puts the
    cause there and its server log's tail below).

    >>> one_line(RuntimeError("replica 0 (vllm) exited with 1 at start: no weights\\nlog tail ..."))
    'replica 0 (vllm) exited with 1 at start: no weights'
    """
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__
