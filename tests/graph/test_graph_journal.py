"""A state's journal: every committed write is on disk, replayed exactly, and damage is refused.

The reference is the graph in memory: after any sequence of writes and commits, loading the state (its
file and its journal) must give that graph's bytes, whatever calls were made (every operation, premises,
aliases, retractions, undo, erasure, unmerge, authority, soft-identity decisions).
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pmem.graph import OPS, JournaledGraph, ProvenanceGraph, StateChangedError, StateFileError, journal_path
from pmem.graph._persist import _guard, _journal

KEYS = ["a", "b", "c"]
VALUES = ["x", "y", "z"]
SOURCES = ["user", "tool", "web"]

apply_call = st.tuples(
    st.just("apply"),
    st.sampled_from(OPS),
    st.sampled_from(KEYS),
    st.one_of(st.none(), st.sampled_from(VALUES)),
    st.integers(0, 5),
    st.sampled_from(["none", "alias", "premise", "retracts"]),
)
call = st.one_of(
    st.tuples(st.just("observe"), st.sampled_from(SOURCES), st.one_of(st.none(), st.integers(1, 9))),
    apply_call,
    apply_call,  # twice: writes are most of a stream, and unmerge needs an apply with an alias first
    st.tuples(
        st.just("apply"),
        st.just("accept"),
        st.sampled_from(KEYS),
        st.sampled_from(VALUES),
        st.integers(0, 5),
        st.just("alias"),
    ),
    st.tuples(st.just("undo"), st.integers(0, 10_000)),
    st.tuples(st.just("erase"), st.integers(0, 10_000)),
    st.tuples(st.just("unmerge"), st.integers(0, 10_000)),
    st.tuples(st.just("authority"), st.sampled_from(SOURCES), st.integers(0, 2)),
    st.tuples(st.just("decide"), st.sampled_from(["a_1", "b_x", "c2", "d"]), st.booleans()),
    st.tuples(st.just("commit")),
    st.tuples(st.just("reopen")),
)


def make(g: ProvenanceGraph, c: tuple) -> None:
    """Make call ``c`` on ``g``; a call the graph refuses (bad arguments) is part of the test too."""
    kind = c[0]
    evidence = g.stats()["evidence"]
    try:
        if kind == "observe":
            g.observe(f"text {c[1]}", c[1], valid_time=None if c[2] is None else f"2026-01-0{c[2]}")
        elif kind == "apply":
            _, op, key, value, ev, extra = c
            cite = f"e{ev}" if ev < evidence else None
            kwargs: dict = {}
            if extra == "alias":
                kwargs["alias"] = f"{key}_alias"
            elif extra == "premise":
                kwargs["depends_on"] = iter([k for k in KEYS if k != key and g.head_value(k) is not None][:1])
            elif extra == "retracts" and op in ("reject", "revoke") and value is not None:
                kwargs["retracts"] = value
            g.apply(op, key, value, cite, **kwargs)
        elif kind == "undo":
            seqs = [op.seq for op in g.operations()]
            if seqs:
                g.undo(seqs[c[1] % len(seqs)])
        elif kind == "erase" and evidence:
            g.erase(f"e{c[1] % evidence}")
        elif kind == "unmerge":
            aliases = sorted(f"{k}_alias" for k in KEYS)  # the aliases apply records (some may be unused)
            g.unmerge(aliases[c[1] % len(aliases)])
        elif kind == "authority":
            g.set_authority(c[1], c[2])
        elif kind == "decide":
            registered = g.registry.keys
            g.registry.decide(c[1], registered[0] if registered else None, 0.8, c[2])
    except (ValueError, KeyError):
        pass


def on_disk(path) -> bytes:
    """The bytes of the graph the state at ``path`` loads as (an empty graph's when nothing is there:
    nothing was committed)."""
    return ProvenanceGraph.load(path).to_bytes() if path.exists() else ProvenanceGraph().to_bytes()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(calls=st.lists(call, min_size=5, max_size=40))
def test_loading_a_journaled_state_gives_the_graph_that_committed_it(tmp_path_factory, calls) -> None:
    path = tmp_path_factory.mktemp("journal") / "state.arrow"
    g = JournaledGraph.open(path)
    for c in calls:
        if c[0] == "commit":
            g.commit()
            assert on_disk(path) == g.to_bytes()
        elif c[0] == "reopen":
            g.commit()
            committed = g.to_bytes()
            g = JournaledGraph.open(path)
            assert g.to_bytes() == committed
        else:
            make(g, c)
    g.commit()
    assert on_disk(path) == g.to_bytes()


def _journaled(tmp_path, writes: int = 3) -> tuple[JournaledGraph, os.PathLike]:
    path = tmp_path / "state.arrow"
    g = JournaledGraph.open(path)
    for i in range(writes):
        e = g.observe(f"the budget is ${i}k")
        g.apply("accept", "budget", f"${i}k", e)
        g.commit()
    return g, path


def test_a_commit_appends_one_record_and_leaves_the_state_file_alone(tmp_path) -> None:
    g, path = _journaled(tmp_path, writes=1)
    state = path.read_bytes()
    e = g.observe("the budget is $9k")
    g.apply("accept", "budget", "$9k", e)
    g.commit()
    assert path.read_bytes() == state
    journal = _journal.read_journal(path, _guard.state_version(path))
    assert journal is not None and [r.n for r in journal.records] == [1, 2]
    assert journal.records[-1].calls[0] == ["observe", "the budget is $9k", "user", None, None]


def test_nothing_to_commit_writes_nothing(tmp_path) -> None:
    g, path = _journaled(tmp_path, writes=1)
    before = journal_path(path).read_bytes()
    g.commit()
    assert journal_path(path).read_bytes() == before


def test_a_line_torn_by_a_crash_is_left_out_and_cut_by_the_next_writer(tmp_path) -> None:
    _, path = _journaled(tmp_path)
    journal = journal_path(path)
    whole = journal.read_bytes()
    journal.write_bytes(whole[:-7])  # the last record, cut short: a write that never returned
    assert ProvenanceGraph.load(path).head_value("budget") == "$1k"
    g2 = JournaledGraph.open(path)
    assert journal.stat().st_size < len(whole) - 7  # the torn line was cut off
    e = g2.observe("the budget is $7k")
    g2.apply("accept", "budget", "$7k", e)
    g2.commit()
    assert ProvenanceGraph.load(path).to_bytes() == g2.to_bytes()


def test_a_damaged_line_before_the_last_is_refused_naming_it(tmp_path) -> None:
    _, path = _journaled(tmp_path)
    journal = journal_path(path)
    data = bytearray(journal.read_bytes())
    second = data.index(b"\n") + 40  # inside record 1
    data[second] ^= 0x01
    journal.write_bytes(bytes(data))
    with pytest.raises(StateFileError, match="line 2 does not verify"):
        ProvenanceGraph.load(path)


def test_a_plain_save_over_a_journaled_state_replaces_it_journal_and_all(tmp_path) -> None:
    _, path = _journaled(tmp_path)
    other = ProvenanceGraph()
    other.apply("accept", "budget", "$99k")
    other.save(path)  # a save that never loaded this state replaces it: its journal goes with it
    assert not journal_path(path).exists()
    assert ProvenanceGraph.load(path).to_bytes() == other.to_bytes()


def test_a_journal_of_another_state_is_refused(tmp_path) -> None:
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    g, path = _journaled(tmp_path / "one")
    g.save(path)  # folded: this state file is no longer the empty one both journals started from
    _, other = _journaled(tmp_path / "two", writes=2)
    journal_path(path).write_bytes(journal_path(other).read_bytes())  # copied beside a state not its own
    with pytest.raises(StateFileError, match="applies to state"):
        ProvenanceGraph.load(path)


def test_a_fold_killed_before_it_removed_the_journal_is_not_replayed_twice(tmp_path) -> None:
    g, path = _journaled(tmp_path)
    journal = journal_path(path)
    kept = journal.read_bytes()
    g.save(path)  # the fold: state replaced, journal removed
    digest = _guard.state_version(path)
    # put the journal back as the kill left it: its records, then the note naming the new state
    journal.write_bytes(kept + _journal._line({"compacting": digest}))
    assert ProvenanceGraph.load(path).to_bytes() == g.to_bytes()
    assert not journal.exists()  # the spent journal was removed by the load


def test_an_erasure_is_committed_by_saving_the_state_so_its_text_leaves_the_disk(tmp_path) -> None:
    g, path = _journaled(tmp_path)
    g.erase("e1")
    g.commit()
    assert not journal_path(path).exists()
    data = path.read_bytes()
    assert b"the budget is $1k" not in data and b"the budget is $2k" in data
    assert ProvenanceGraph.load(path).to_bytes() == g.to_bytes()


def test_a_commit_over_a_state_another_writer_changed_is_refused_and_keeps_its_writes(tmp_path) -> None:
    mine, path = _journaled(tmp_path)
    theirs = JournaledGraph.open(path)
    theirs.apply("accept", "owner", "Bob")
    theirs.commit()
    mine.apply("accept", "owner", "Carol")
    with pytest.raises(StateChangedError):
        mine.commit()
    assert mine.pending == 1
    assert ProvenanceGraph.load(path).head_value("owner") == "Bob"


def test_a_new_state_is_refused_where_another_writer_made_one_meanwhile(tmp_path) -> None:
    path = tmp_path / "state.arrow"
    first, second = JournaledGraph.open(path), JournaledGraph.open(path)
    first.apply("accept", "owner", "Bob")
    first.commit()
    second.apply("accept", "owner", "Carol")
    with pytest.raises(StateChangedError):
        second.commit()


def test_a_journal_that_outgrows_its_state_is_folded(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(_guard, "FOLD_MIN_BYTES", 0)
    g, path = _journaled(tmp_path, writes=1)
    for i in range(200):
        g.apply("accept", f"k{i}", "v" * 50)
        g.commit()
        if not journal_path(path).exists():
            break
    else:
        pytest.fail("the journal never folded")
    assert ProvenanceGraph.load(path).to_bytes() == g.to_bytes()


def test_a_graph_made_without_open_commits_nothing(tmp_path) -> None:
    with pytest.raises(ValueError, match="bound to no state file"):
        JournaledGraph().commit()


def test_a_per_key_read_of_the_saved_file_alone_is_refused_while_a_journal_holds_later_writes(
    tmp_path,
) -> None:
    from pmem.graph import read_key_versions

    g, path = _journaled(tmp_path)
    with pytest.raises(StateFileError, match=r"state\.arrow\.journal, which a read"):
        read_key_versions(path, "budget")
    g.save(path)  # folded: the file is the whole state again
    assert [v.value for v in read_key_versions(path, "budget")] == ["$0k", "$1k", "$2k"]


# ---------------------------------------------------------------------- failed writes (issue 54)


def test_an_append_that_finds_the_disk_full_is_cut_back_raises_and_is_made_again_once_there_is_room(
    tmpfs, fill_disk
) -> None:
    g, path = _journaled(tmpfs(128))
    journal = journal_path(path)
    filler = fill_disk(path.parent, leave=64)  # room for part of a record: the disk fills mid-line
    before = journal.read_bytes()
    g.apply("accept", "owner", "x" * 6000, g.observe("the owner is " + "x" * 6000))
    with pytest.raises(OSError):
        g.commit()
    assert journal.read_bytes() == before  # nothing of the record is left
    assert g.pending == 2  # the writes wait for a commit that lands
    filler.unlink()
    g.commit()
    assert ProvenanceGraph.load(path).to_bytes() == g.to_bytes()


class _FailingOs:
    """The ``os`` module as one graph module sees it, with some calls replaced: a fault injected there
    alone, never into the process's ``os`` (other threads of a test process write too)."""

    def __init__(self, **calls: object) -> None:
        self._calls = calls

    def __getattr__(self, name: str) -> object:
        return self._calls.get(name, getattr(os, name))


def test_a_torn_line_whose_cut_failed_is_cut_by_the_next_append(tmp_path, monkeypatch) -> None:
    g, path = _journaled(tmp_path)

    def half_then_full(fd: int, data) -> int:
        if len(data) > 40:
            os.write(fd, bytes(data[: len(data) // 2]))
        raise OSError(28, "No space left on device")

    def cannot_cut(fd: int, size: int) -> None:
        raise OSError(5, "Input/output error")

    g.apply("accept", "owner", "Bob", g.observe("the owner is Bob"))
    monkeypatch.setattr(_journal, "os", _FailingOs(write=half_then_full, ftruncate=cannot_cut))
    with pytest.raises(OSError, match="No space left") as failed:
        g.commit()
    assert any("the next open or append cuts it" in note for note in failed.value.__notes__)
    monkeypatch.undo()
    assert not journal_path(path).read_bytes().endswith(b"\n")  # the torn half-line is there
    g.apply("accept", "owner", "Carol", g.observe("the owner is Carol"))
    g.commit()  # lands after the last whole record, the torn line cut off
    assert ProvenanceGraph.load(path).to_bytes() == g.to_bytes()


def test_a_fold_that_fails_before_it_replaces_the_state_leaves_the_journal_going_on(
    tmp_path, monkeypatch
) -> None:
    from pmem.graph._persist import _state

    g, path = _journaled(tmp_path)

    def refused(src, dst) -> None:
        raise OSError(28, "No space left on device")

    g.erase("e0")  # an erasure folds the journal into the state
    monkeypatch.setattr(_state, "os", _FailingOs(replace=refused))
    with pytest.raises(OSError):
        g.commit()  # the note of the fold was written, the rename failed
    monkeypatch.undo()
    assert b"compacting" not in journal_path(path).read_bytes()  # the note was taken back
    g.apply("accept", "owner", "Bob", g.observe("the owner is Bob"))
    g.commit()
    assert ProvenanceGraph.load(path).to_bytes() == g.to_bytes()


def test_a_fold_note_followed_by_records_is_a_fold_that_never_replaced_the_state(tmp_path) -> None:
    g, path = _journaled(tmp_path)
    journal = journal_path(path)
    # a fold killed between its note and its rename, then a writer (an older one) appended records
    lines = journal.read_bytes().splitlines(keepends=True)
    note = _journal._line({"compacting": "0" * 32})
    journal.write_bytes(b"".join([*lines[:2], note, *lines[2:]]))
    assert ProvenanceGraph.load(path).to_bytes() == g.to_bytes()


def test_a_fold_whose_spent_journal_could_not_be_removed_is_made_again_by_the_next_commit(
    tmp_path, monkeypatch
) -> None:
    g, path = _journaled(tmp_path)

    def refused(state) -> None:
        raise OSError(5, "Input/output error")

    g.erase("e0")
    monkeypatch.setattr(_journal, "remove_journal", refused)
    with pytest.raises(OSError):
        g.commit()  # the state was replaced; its journal, spent, holds the erased text still
    monkeypatch.undo()
    assert b"the budget is $0k" in journal_path(path).read_bytes()
    assert g.pending == 1  # the erasure waits for a commit that lands whole
    g.apply("accept", "owner", "Bob", g.observe("the owner is Bob"))
    g.commit()
    assert ProvenanceGraph.load(path).to_bytes() == g.to_bytes()
    assert not journal_path(path).exists()  # folded again, the spent journal gone with the text
    assert b"the budget is $0k" not in path.read_bytes()
