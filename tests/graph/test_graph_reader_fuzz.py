"""The default reader is safe (issue 54, item 3): a state damaged the ways a disk, a copy or a hand
damages one (bits flipped, files truncated or deleted, files and whole parts copied in from another state)
is read by ``StateReader(STATE)`` with no crash and no wrong answer: each reply is the undamaged state's,
or a ``StateFileError``. Each trial runs in a child process (``readerfuzz``), so that a SIGBUS or SIGSEGV
in native code is counted, not fatal. The default suite samples the cases (:data:`SAMPLES`); ``make
test-slow`` runs them all, with 16 times as many bits flipped.

Before, the reader handed the mapped bytes to Arrow unchecked unless asked to verify them: one flipped bit
of a directory state's ``metadata.arrow`` killed the process with SIGBUS, flips in ``versions.arrow`` or
``keys.arrow`` gave other values, and a sharded state's part whose tables came from another sharded state
answered half its keys wrong (or raised an IndexError). Read trusted (``StateReader(STATE, trusted=True)``,
the old default), the default suite's 289 trials gave 1 SIGSEGV, 145 wrong answers in 40 trials and 14
trials with another exception; read by default, every one is refused or the same."""

from __future__ import annotations

from pathlib import Path

import pytest
from readerfuzz import cases, tally, trials
from shardlogs import random_log, sharded_state

from pmem.graph import ProvenanceGraph

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="module")
def subjects(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Per kind of state, a folder holding ``state`` and ``other`` (a state of the same kind)."""
    tmp = tmp_path_factory.mktemp("reader-fuzz")
    # the schema-2 fixture's graph holds authority, premises, undo, erasure and identity decisions
    mine = ProvenanceGraph.load(FIXTURES / "state-schema-2.arrow")
    for layout in ("file", "directory"):
        (tmp / layout).mkdir()
        mine.save(tmp / layout / "state", layout=layout)
    mine.apply("accept", "one.more", "fact", evidence=mine.observe("one more fact"))
    mine.save(tmp / "directory" / "other", layout="directory")
    mine.save(tmp / "file" / "other")
    out = {"file": tmp / "file", "directory": tmp / "directory"}
    for kind, numbering in (("sharded", True), ("sharded version 1", False)):
        folder = tmp / kind.replace(" ", "-")
        for name, seed in (("state", 7), ("other", 8)):
            (folder / f"{name}-build").mkdir(parents=True)  # the build's scratch (its parts' logs)
            log = random_log(seed, 300, dated=0.02)
            sharded_state(folder / f"{name}-build", log, 3, numbering=numbering).rename(folder / name)
        out[kind] = folder
    return out


def _fuzz(subject: Path, flips: int, every: int = 1) -> dict[str, int]:
    """The trials of every ``every``-th case and of every file or part copied in from another state
    (those only the listings catch), their outcomes tallied; none may crash, err or answer wrong."""
    chosen = cases(subject / "state", subject / "other", flips)
    results = trials(subject, [c for i, c in enumerate(chosen) if i % every == 0 or c.startswith("foreign")])
    counts = tally(results)
    bad = {
        trial: outcome for trial, outcome in results.items() if not outcome.startswith(("refused", "same"))
    }
    assert not bad, (counts, dict(list(bad.items())[:10]))
    return counts


#: Bits flipped in each file of a state by kind, and the share of the cases the default suite runs (a
#: state file is one file, a sharded state some 60: a trial of one reads a key of each part and the
#: frontier, some 40 ms); the slow test runs every case, with 16 times the flips.
SAMPLES = {"file": (96, 1), "directory": (12, 2), "sharded": (4, 8), "sharded version 1": (4, 16)}


@pytest.mark.parametrize("kind", list(SAMPLES))
def test_the_default_reader_refuses_damage_and_never_answers_from_it(
    subjects: dict[str, Path], kind: str
) -> None:
    flips, every = SAMPLES[kind]
    counts = _fuzz(subjects[kind], flips, every)
    assert counts["refused"] >= 30, counts  # the damage reaches the files a read needs
    assert counts["crashes"] == counts["wrong answers"] == counts["errors"] == 0, counts


@pytest.mark.slow  # a few minutes: every case, 16 times the default's flips, each trial in a child process
@pytest.mark.parametrize("kind", list(SAMPLES))
def test_the_default_reader_refuses_every_damage(subjects: dict[str, Path], kind: str) -> None:
    print(kind, _fuzz(subjects[kind], 16 * SAMPLES[kind][0]))
