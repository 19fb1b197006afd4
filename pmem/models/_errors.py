"""Errors of the model layer."""

from __future__ import annotations


class ModelCallError(RuntimeError):
    """A model call failed for good (after its retries). ``endpoint`` names the URL that failed.

    ``failover`` is true when the endpoint itself looked down (connection refused or dropped, timeout,
    5xx), so a router may retry the call on another replica.
    """

    def __init__(self, message: str, *, endpoint: str | None = None, failover: bool = False) -> None:
        super().__init__(message)
        self.endpoint = endpoint
        self.failover = failover


class MissingDependencyError(ImportError):
    """An optional dependency of a backend is not installed; the message names the extra."""
