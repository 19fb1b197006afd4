"""Exclusive locks on output folders: one writer at a time, its holder named, a dead holder's lock free.

A sweep holds one on its run directory and an ingest on its state's working folder for their whole run:
a second command aimed at the same output is refused at once, in one line naming the process that holds
it. The lock is the operating system's (``filelock``'s ``fcntl`` lock on Unix), so it goes with its
process: a killed run leaves nothing to clean up, and the next run takes the lock over.

>>> import pathlib, tempfile
>>> root = pathlib.Path(tempfile.mkdtemp())
>>> held = hold_exclusive(root / ".lock", f"{root}")
>>> try:
...     hold_exclusive(root / ".lock", f"{root}")
... except LockHeldError as exc:
...     "is in use by pid" in str(exc)
True
>>> held.release()
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path

from filelock import BaseFileLock, FileLock, Timeout


class LockHeldError(RuntimeError):
    """Another live process holds the lock; the message names it."""


def _holder_path(lock: Path) -> Path:
    # the holder's note lives beside the lock file: opening a lock file to try it may truncate it
    return lock.with_name(lock.name + ".holder")


def hold_exclusive(lock: Path, what: str, *, hint: str = "wait for it to end or stop it") -> BaseFileLock:
    """Take the exclusive lock at ``lock`` without waiting; the caller releases it (or exits).

    Args:
        lock: the lock file (its folder must exist).
        what: how the message names the locked thing (a path, usually).
        hint: what the message tells the user to do.

    Returns:
        The held lock (``.release()`` it when done).

    Raises:
        LockHeldError: another process holds it; the message names its pid, host, start and command.
    """
    held = FileLock(str(lock), timeout=0, thread_local=False, is_singleton=False)
    try:
        held.acquire()
    except Timeout:
        msg = f"{what} is in use by {_describe_holder(lock)}; {hint}"
        raise LockHeldError(msg) from None
    note = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "command": " ".join(Path(sys.argv[0]).name if i == 0 else a for i, a in enumerate(sys.argv))[:200],
    }
    _holder_path(lock).write_text(json.dumps(note))
    return held


def _describe_holder(lock: Path) -> str:
    try:
        note = json.loads(_holder_path(lock).read_text())
        return f"pid {note['pid']} on {note['host']} (since {note['started']}: {note['command']})"
    except (OSError, ValueError, KeyError, TypeError):
        return f"another process (lock {lock})"
