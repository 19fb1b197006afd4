"""Flip bits of a state file and load each damaged copy through the library, in child processes.

A child loads one damaged copy after another and reports each outcome on its stdout as it goes; when it
dies (a crash in native code: SIGSEGV, SIGABRT), the copy it was loading is recorded as a crash and a new
child goes on from the next one. Outcomes: ``refused`` (StateFileError), ``same`` (loaded the saved graph:
``to_bytes()`` equal to the undamaged file's), ``different`` (loaded another graph), ``error:<Type>``
(any other exception), ``crash:<signal>``.

Run as a script it is the child: ``python bitflips.py STATE BITS_FILE`` (bit indices, one a line).
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from child_trials import run_trials

HERE = Path(__file__).resolve().parent


def flipped(data: bytes, bit: int) -> bytes:
    damaged = bytearray(data)
    damaged[bit // 8] ^= 1 << (bit % 8)
    return bytes(damaged)


def _child(state: Path, bits_file: Path) -> int:
    from pmem.graph import ProvenanceGraph, StateFileError

    data = state.read_bytes()
    reference = ProvenanceGraph.load(state).to_bytes()
    folder = Path(tempfile.mkdtemp(prefix="flips-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None))
    target = folder / "damaged.arrow"
    for line in bits_file.read_text().split():
        bit = int(line)
        target.write_bytes(flipped(data, bit))
        print(f"{bit} start", flush=True)  # a crash from here on is this bit's
        try:
            graph = ProvenanceGraph.load(target)
            outcome = "same" if graph.to_bytes() == reference else "different"
        except StateFileError:
            outcome = "refused"
        except Exception as exc:  # what the trial measures
            outcome = f"error:{type(exc).__name__}:{str(exc)[:120]}"
        print(f"{bit} {outcome}", flush=True)
    target.unlink(missing_ok=True)
    folder.rmdir()
    return 0


def trials(state: Path, bits: Iterable[int]) -> dict[int, str]:
    """Each bit's outcome (see the module docstring); crashed children are replaced."""
    work = Path(tempfile.mkdtemp(prefix="flip-bits-"))
    found = run_trials(HERE / "bitflips.py", state, [str(b) for b in bits], work)
    work.rmdir()
    return {int(bit): outcome for bit, outcome in found.items()}


def summary(results: dict[int, str]) -> Counter[str]:
    """Outcomes counted by kind (``error:KeyError:...`` counts as ``error:KeyError``)."""
    return Counter(":".join(o.split(":")[:2]) for o in results.values())


if __name__ == "__main__":
    raise SystemExit(_child(Path(sys.argv[1]), Path(sys.argv[2])))
