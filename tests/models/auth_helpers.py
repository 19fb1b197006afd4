"""Helpers of the credential tests: plain-urllib requests and the checks a protected server must pass."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

from pmem.models.sections import format_sections

MSG = [{"role": "user", "content": format_sections({"KEY_A": "a.b", "KEY_B": "a.b"})}]
KEY = "k3y-Zq7vN2pL9xW4mR8tB6cY1hJ5dF0s"


def http(url: str, *, key: str | None = None, body: dict | None = None) -> tuple[int, dict | str]:
    """A plain urllib request (no client library): status and the decoded body."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method="POST" if data else "GET")
    req.add_header("Content-Type", "application/json")
    if key is not None:
        req.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            status, raw = resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read()
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw.decode("utf-8", "replace")


CHAT = {"model": "heuristic", "messages": MSG}


def assert_refused(status: int, body: dict | str) -> None:
    assert status == 401, (status, body)
    assert isinstance(body, dict) and body["error"]["code"] == "invalid_api_key" and body["error"]["message"]


def check_auth(base: str, key: str) -> None:
    """/health is open; /v1 routes refuse no key, a wrong key, a prefix or an extension of the key."""
    assert http(f"{base}/health")[0] == 200
    assert_refused(*http(f"{base}/v1/chat/completions", body=CHAT))
    assert_refused(*http(f"{base}/v1/models"))
    for wrong in ("wrong", key[:-1], key[:8], f"{key}x", key.upper(), ""):
        status, body = http(f"{base}/v1/chat/completions", key=wrong, body=CHAT)
        assert_refused(status, body)
        assert key not in json.dumps(body)  # the refusal never echoes a key
    status, body = http(f"{base}/v1/chat/completions", key=key, body=CHAT)
    assert status == 200 and body["choices"][0]["message"]["content"] == "same"


def cmdlines() -> list[bytes]:
    """Every process's command line (what `ps` shows any user)."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                out.append((d / "cmdline").read_bytes())
            except OSError:
                continue
    return out
