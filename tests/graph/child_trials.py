"""Run trials in child processes that are replaced when they crash (the bit-flip and state fuzzers).

A child script is run as ``python SCRIPT SUBJECT LIST_FILE``: it reads one trial per line of
LIST_FILE and prints ``<trial> start`` before each and ``<trial> <outcome>`` after it. A child that
dies mid-trial leaves that trial ``crash:<signal or exit code>``; the next child takes the rest.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path


def run_trials(script: Path, subject: Path, todo: list[str], work: Path) -> dict[str, str]:
    """Each trial's outcome, by its line; ``work`` holds the list file handed to each child."""
    results: dict[str, str] = {}
    env = {**os.environ, "PYTHONFAULTHANDLER": ""}
    list_file = work / "trials"
    while todo:
        list_file.write_text("\n".join(todo))
        proc = subprocess.Popen(
            [sys.executable, str(script), str(subject), str(list_file)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
        )
        assert proc.stdout is not None
        started: str | None = None
        for line in proc.stdout:
            trial, outcome = line.rstrip("\n").split(" ", 1)
            if outcome == "start":
                started = trial
            else:
                results[trial] = outcome
                started = None
        code = proc.wait()
        if started is not None:  # the child died in this trial
            results[started] = f"crash:{signal.Signals(-code).name if code < 0 else f'exit {code}'}"
        elif code != 0:
            msg = f"the trial child {script.name} failed before any trial (exit {code})"
            raise RuntimeError(msg)
        todo = [t for t in todo if t not in results]
    list_file.unlink(missing_ok=True)
    return results
