"""Determinism across interpreters: a graph built in a fresh Python with another hash seed must have the
same bytes. Two builds in one process agree whatever the code does with set or dict order (string hashes
are fixed for the life of a process), so a check within one process cannot fail on that."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
_CHILD = """
import hashlib, importlib, json, sys
module, function = sys.argv[1].split(":")
build = getattr(importlib.import_module(module), function)
inputs = json.loads(sys.stdin.read())
print(json.dumps([hashlib.sha256(build(*args).to_bytes()).hexdigest() for args in inputs]))
"""


def digest(graph: Any) -> str:
    """The sha256 of a graph's state bytes."""
    return hashlib.sha256(graph.to_bytes()).hexdigest()


def digests_elsewhere(builder: str, inputs: list[list[Any]], hash_seed: int) -> list[str]:
    """``builder`` (``module:function`` of this folder, returning a graph) called on each of ``inputs``
    (argument lists, JSON) in a fresh interpreter whose string hashes use ``hash_seed``; each graph's
    digest."""
    env = {
        **os.environ,
        "PYTHONHASHSEED": str(hash_seed),
        "PYTHONPATH": os.pathsep.join([str(HERE), str(HERE.parent)]),
    }
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, builder],
        input=json.dumps(inputs),
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return list(json.loads(done.stdout))
