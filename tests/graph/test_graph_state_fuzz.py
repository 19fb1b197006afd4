"""Directory and sharded states damaged every way a copy or a hand goes wrong are refused whole (issue 41,
acceptance 4): files deleted, truncated, swapped, copied in from another state; metadata and a sharded
state's index edited and sealed again, alone or with another state's files whose digests the edit writes
in. Each load runs in a child process (``statefuzz``): 0 crashes, 0 exceptions but StateFileError, 0 loads
of another graph. The default suite runs every 8th case and every one that reseals with another
state's digests; ``make test-slow`` runs them all.

Before, a sharded state's parts were not read on load: part-0's tables copied from another state loaded
(a scan of ``part-*/versions.arrow`` then read the other state), a deleted or truncated part table went
unnoticed, and an index edited to ``partitions`` 3 or naming another digest, resealed, loaded."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from statefuzz import cases, trials
from test_graph_shards import random_log, sharded_state

from pmem.graph import ProvenanceGraph

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="module")
def states(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    """Per kind, a state and another of the same kind to copy files from."""
    tmp = tmp_path_factory.mktemp("fuzz")
    # the schema-2 fixture's graph holds authority, premises, undo, erasure and identity decisions
    mine = ProvenanceGraph.load(FIXTURES / "state-schema-2.arrow")
    mine.save(tmp / "directory", layout="directory")
    mine.apply("accept", "one.more", "fact", evidence=mine.observe("one more fact"))
    mine.save(tmp / "directory-other", layout="directory")
    built = {}
    for name, seed in (("sharded", 7), ("sharded-other", 8)):
        (tmp / name).mkdir()
        registered = tuple(f"key{k}" for k in range(seed - 4))  # the two registries differ
        built[name] = sharded_state(tmp / name, random_log(seed, 300, dated=0.02), 2, registered=registered)
    return {
        "directory": (tmp / "directory", tmp / "directory-other"),
        "sharded": (built["sharded"], built["sharded-other"]),
    }


def _fuzz(states: dict[str, tuple[Path, Path]], kind: str, every: int) -> Counter[str]:
    root, other = states[kind]
    chosen = cases(root, other)
    names = [name for name, _ in chosen]
    assert len(set(names)) == len(names)
    # a sample keeps every case that reseals with another state's digests: those only a cross-check of
    # the parts with the union refuses
    results = trials(root, [c for i, c in enumerate(chosen) if i % every == 0 or "resealed" in c[0]])
    bad = {name: outcome for name, outcome in results.items() if outcome not in ("refused", "same")}
    assert not bad, bad
    return Counter(outcome.split(":")[0] for outcome in results.values())


@pytest.mark.parametrize("kind", ["directory", "sharded"])
def test_a_sample_of_damaged_states_is_refused(states: dict[str, tuple[Path, Path]], kind: str) -> None:
    counts = _fuzz(states, kind, every=8)
    assert counts["refused"] >= 10, counts


@pytest.mark.slow  # about a minute: every case, each load in a child process
@pytest.mark.parametrize("kind", ["directory", "sharded"])
def test_every_damaged_state_is_refused(states: dict[str, tuple[Path, Path]], kind: str) -> None:
    print(kind, dict(_fuzz(states, kind, every=1)))
