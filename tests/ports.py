"""Ports on 127.0.0.1 for the tests: one free now, and a URL where nothing listens."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on now (bound and released at once: a server started on
    it afterwards may, rarely, find it taken; a server that can take ``--port 0`` should)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def closed_port_url() -> str:
    """An OpenAI-style base URL on 127.0.0.1 where nothing listens: connections to it are refused."""
    return f"http://127.0.0.1:{free_port()}/v1"
