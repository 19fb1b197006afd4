"""A save never silently replaces a state that changed since the graph loaded it (issue 41, item 3): the
save holds the state's lock, finds another version there and raises StateChangedError naming both,
writing nothing. Before, the last writer won and the other's facts were gone without a word."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pmem.graph import ProvenanceGraph, StateChangedError
from pmem.graph._persist._state import Layout, state_version


def _with(path: Path, key: str, value: str) -> ProvenanceGraph:
    """The state at ``path`` loaded, with one more fact."""
    graph = ProvenanceGraph.load(path)
    graph.apply("accept", key, value, evidence=graph.observe(f"{key} is {value}"))
    return graph


@pytest.mark.parametrize("layout", ["file", "directory"])
def test_the_second_of_two_savers_of_one_loaded_state_is_refused(tmp_path: Path, layout: Layout) -> None:
    path = tmp_path / ("s.arrow" if layout == "file" else "s")
    ProvenanceGraph().save(path, layout=layout)
    loaded = state_version(path)
    first, second = _with(path, "a", "1"), _with(path, "b", "2")
    first.save(path, layout=layout)
    saved = state_version(path)
    with pytest.raises(StateChangedError) as caught:
        second.save(path, layout=layout)
    message = str(caught.value)
    assert f"version {loaded}" in message and f"now version {saved}" in message  # both versions named
    assert caught.value.expected == loaded and caught.value.found == saved
    assert state_version(path) == saved  # nothing written
    assert ProvenanceGraph.load(path).frontier_items() == [("a", "1")]
    # the refused graph, loaded again with its change redone, saves
    again = _with(path, "b", "2")
    again.save(path, layout=layout)
    assert ProvenanceGraph.load(path).frontier_items() == [("a", "1"), ("b", "2")]


def test_a_graph_saves_over_its_own_saves_and_refuses_after_another(tmp_path: Path) -> None:
    path = tmp_path / "s.arrow"
    mine = ProvenanceGraph()
    mine.save(path)
    mine.apply("accept", "a", "1")
    mine.save(path)  # over what it saved itself: its recorded version
    _with(path, "b", "2").save(path)  # another graph saves in between
    mine.apply("accept", "c", "3")
    with pytest.raises(StateChangedError, match="changed since this graph loaded or saved it"):
        mine.save(path)
    assert [k for k, _ in ProvenanceGraph.load(path).frontier_items()] == ["a", "b"]


def test_a_state_removed_meanwhile_is_written_again(tmp_path: Path) -> None:
    """Nothing is replaced, so nothing can be lost: the save goes through."""
    path = tmp_path / "s.arrow"
    ProvenanceGraph().save(path)
    graph = _with(path, "a", "1")
    path.unlink()
    graph.save(path)
    assert ProvenanceGraph.load(path).frontier_items() == [("a", "1")]


def test_new_refuses_any_state_and_a_plain_save_of_a_fresh_graph_replaces(tmp_path: Path) -> None:
    path = tmp_path / "s.arrow"
    ProvenanceGraph().save(path, new=True)  # nothing there: created
    with pytest.raises(StateChangedError, match=re.escape("was not there when this memory started")):
        ProvenanceGraph().save(path, new=True)
    fresh = ProvenanceGraph()
    fresh.apply("accept", "a", "1")
    fresh.save(path)  # a graph that never loaded nor saved here replaces what is there, as before
    assert ProvenanceGraph.load(path).frontier_items() == [("a", "1")]


def test_the_lock_file_is_beside_the_state_and_a_bad_target_makes_none(tmp_path: Path) -> None:
    path = tmp_path / "s.arrow"
    ProvenanceGraph().save(path)
    assert not (tmp_path / ".s.arrow.lock").exists()  # an unchecked save takes no lock
    ProvenanceGraph.load(path).save(path)
    assert (tmp_path / ".s.arrow.lock").is_file()
    with pytest.raises(FileNotFoundError):
        ProvenanceGraph().save(tmp_path / "missing" / "s.arrow", new=True)
    assert not (tmp_path / "missing").exists()
