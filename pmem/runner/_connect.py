"""Which Ray a sweep runs on, and connecting to it without hanging.

Three cases, decided by the caller's address and the environment:

- ``--address ADDR`` (or ``address=`` in the library): the named cluster. Ray's own connect retries for
  many minutes against a dead or half-alive cluster, printing a GCS warning every few seconds, so the
  address is checked first, within ``timeout_s``: a TCP connection to it, then a complete Ray handshake
  in a child process that is killed at the deadline. Failure is one :class:`ClusterUnreachable` line.
- ``RAY_ADDRESS`` set, no address given: inside ``ray job submit``; the job's cluster, as Ray decides.
- neither: the embedded mode. Always a new local Ray (``address="local"``), never "the latest cluster
  started on this machine", which is what ``ray.init()`` without an address means: a stale
  ``ray_current_cluster`` file would make it hang, and a live one would run the "embedded" sweep on a
  cluster the user did not name.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterator

#: the embedded mode's address: Ray's documented value for "start a new local cluster"
LOCAL = "local"


class ClusterUnreachable(RuntimeError):
    """The named Ray cluster did not answer in time; the message is one line naming the address."""


def embedded(address: str | None) -> bool:
    """True when this process would start its own local Ray."""
    return not address and not os.environ.get("RAY_ADDRESS")


def connect(address: str | None, *, timeout_s: float = 60.0, **init_kwargs: Any) -> bool:
    """Initialize Ray for a sweep; True when this call started it (and the caller should shut it down)."""
    import ray

    if ray.is_initialized():
        return False
    kwargs: dict[str, Any] = {"configure_logging": False, "log_to_driver": True, **init_kwargs}
    if address:
        check_reachable(address, timeout_s=timeout_s)
        ray.init(address=address, **kwargs)
    elif os.environ.get("RAY_ADDRESS"):
        ray.init(address=os.environ["RAY_ADDRESS"], **kwargs)  # inside `ray job submit`: the job's cluster
    else:
        with quiet_token_notice():
            ray.init(address=LOCAL, include_dashboard=False, **kwargs)
    return True


#: the logger of Ray's notice "Token authentication is enabled for this Ray cluster. Set RAY_AUTH_MODE=..."
TOKEN_NOTICE_LOGGER = "ray._private.authentication.authentication_token_setup"


@contextlib.contextmanager
def quiet_token_notice() -> Iterator[None]:
    """Hold back Ray's token-authentication notice while an embedded cluster starts.

    The embedded cluster is private to this process tree and keeps Ray's default (token authentication
    on, token created if missing); the notice tells the user how to turn that off, which is no setting
    of theirs. Warnings about anything else, and errors, still show.
    """
    logger = logging.getLogger(TOKEN_NOTICE_LOGGER)
    notice = _TokenNoticeFilter()
    logger.addFilter(notice)
    try:
        yield
    finally:
        logger.removeFilter(notice)


class _TokenNoticeFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Token authentication is enabled")


def _host_port(address: str) -> tuple[str, int] | None:
    """(host, port) of ``host:port`` or ``ray://host:port``; None when the address names no endpoint."""
    rest = address.split("://", 1)[1] if "://" in address else address
    host, sep, port = rest.rstrip("/").rpartition(":")
    if not sep or not port.isdigit():
        return None
    return host.strip("[]") or "127.0.0.1", int(port)


def check_reachable(address: str, *, timeout_s: float = 60.0) -> None:
    """Raise :class:`ClusterUnreachable` unless a Ray driver can connect to ``address`` within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    endpoint = _host_port(address)
    if endpoint is not None:
        try:
            with socket.create_connection(endpoint, timeout=min(5.0, timeout_s)):
                pass
        except OSError as exc:
            msg = f"cannot reach the Ray cluster at {address}: {exc.strerror or exc}"
            raise ClusterUnreachable(msg) from None
    # A port that accepts is not yet a cluster that answers: do the whole handshake where it can be killed.
    probe = "import ray, sys; ray.init(address=sys.argv[1], configure_logging=False, log_to_driver=False); ray.shutdown()"
    env = {**os.environ, "RAY_DEDUP_LOGS": "0"}
    try:
        proc = subprocess.run(
            [sys.executable, "-c", probe, address],
            capture_output=True,
            env=env,
            timeout=max(1.0, deadline - time.monotonic()),
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        msg = (
            f"the Ray cluster at {address} did not answer within {timeout_s:g} s "
            "(set --connect-timeout or [run] connect_timeout_s to wait longer)"
        )
        raise ClusterUnreachable(msg) from None
    if proc.returncode != 0:
        lines = [ln.strip() for ln in proc.stderr.decode(errors="replace").splitlines() if ln.strip()]
        why = next(
            (ln for ln in reversed(lines) if "Error" in ln or "error" in ln), lines[-1] if lines else ""
        )
        msg = f"cannot connect to the Ray cluster at {address}: {why[:300] or f'exit code {proc.returncode}'}"
        raise ClusterUnreachable(msg)
