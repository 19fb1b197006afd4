"""Issue 11: the core never accepts what it cannot keep.

Every public mutator validates all of its arguments before touching anything: a refused call raises with
a message naming the argument, and the saved bytes are exactly those of before the call. Strings that
cannot be written (lone surrogates) and keys that could forge rendered lines (control characters) are
refused at the door.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pytest

from pmem.graph import Patch, PatchController, ProvenanceGraph

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

BAD = "a\udc80b"  # a lone surrogate: valid in a Python str, not encodable as UTF-8
CONTROL_KEYS = ["a\nb", "a\rb", "a\tb", "a\x00b", "a\x1fb", "a\x7fb", "a\x85b", "a\u2028b", "a\u2029b", "\n"]


def populated() -> ProvenanceGraph:
    g = ProvenanceGraph()
    e = g.observe("k is a", source="user", time="2024-01-01")
    g.apply("accept", "k", "a", evidence=e)
    g.apply("accept", "k", "b", evidence=g.observe("k is b"))
    g.apply("contest", "k", "c")
    # the registry is created lazily and saved with the graph: create it before taking the snapshot
    g.registry.resolve("user.city")
    g.registry.resolve("project.budget")
    return g


def saved(g: ProvenanceGraph, path: Path) -> bytes:
    g.save(path)
    return path.read_bytes()


class _Time:
    """A time-like object whose isoformat does not return a string."""

    def isoformat(self) -> object:
        return 20240101


Case = tuple[str, "Callable[[ProvenanceGraph], object]", str]

CASES: list[Case] = [
    # observe
    ("observe-text-none", lambda g: g.observe(None), "text"),
    ("observe-text-bytes", lambda g: g.observe(b"x"), "text"),
    ("observe-text-surrogate", lambda g: g.observe(BAD), "text"),
    ("observe-source-empty", lambda g: g.observe("x", source=""), "source"),
    ("observe-source-int", lambda g: g.observe("x", source=5), "source"),
    ("observe-source-list", lambda g: g.observe("x", source=["user"]), "source"),
    ("observe-source-surrogate", lambda g: g.observe("x", source=BAD), "source"),
    ("observe-time-int", lambda g: g.observe("x", time=123), "time"),
    ("observe-time-object", lambda g: g.observe("x", time=object()), "time"),
    ("observe-time-surrogate", lambda g: g.observe("x", time="2024" + BAD), "time"),
    ("observe-time-isoformat-not-str", lambda g: g.observe("x", time=_Time()), "time"),
    # apply
    ("apply-op-unknown", lambda g: g.apply("bogus", "k", "v"), "op"),
    ("apply-op-none", lambda g: g.apply(None, "k", "v"), "op"),
    ("apply-op-list", lambda g: g.apply(["accept"], "k", "v"), "op"),
    ("apply-key-empty", lambda g: g.apply("accept", "", "v"), "key"),
    ("apply-key-none", lambda g: g.apply("accept", None, "v"), "key"),
    ("apply-key-int", lambda g: g.apply("noop", 5), "key"),
    ("apply-key-newline", lambda g: g.apply("accept", "k\nx = y", "v"), "key"),
    ("apply-key-surrogate", lambda g: g.apply("accept", BAD, "v"), "key"),
    ("apply-key-surrogate-noop", lambda g: g.apply("noop", BAD), "key"),
    ("apply-value-int", lambda g: g.apply("accept", "k", 5), "value"),
    ("apply-value-surrogate", lambda g: g.apply("accept", "k", BAD), "value"),
    ("apply-value-surrogate-new-key", lambda g: g.apply("accept", "new", BAD), "value"),
    ("apply-value-surrogate-reject", lambda g: g.apply("reject", "k", BAD), "value"),
    ("apply-value-surrogate-revoke", lambda g: g.apply("revoke", "k", BAD), "value"),
    ("apply-value-surrogate-noop", lambda g: g.apply("noop", "k", BAD), "value"),
    ("apply-value-surrogate-contest", lambda g: g.apply("contest", "k", BAD), "value"),
    ("apply-value-surrogate-failing-resolve", lambda g: g.apply("resolve", "none", BAD), "value"),
    ("apply-accept-without-value", lambda g: g.apply("accept", "k"), "value"),
    ("apply-contest-without-value", lambda g: g.apply("contest", "fresh"), "value"),
    ("apply-resolve-without-value", lambda g: g.apply("resolve", "fresh"), "value"),
    ("apply-evidence-unknown", lambda g: g.apply("accept", "k", "v", evidence="e999"), "evidence"),
    ("apply-evidence-int", lambda g: g.apply("accept", "k", "v", evidence=0), "evidence"),
    ("apply-evidence-list", lambda g: g.apply("noop", "k", evidence=["e0"]), "evidence"),
    ("apply-evidence-surrogate", lambda g: g.apply("accept", "k", "v", evidence="e0" + BAD), "evidence"),
    # KeyRegistry (saved with the graph)
    ("resolve-candidate-empty", lambda g: g.registry.resolve(""), "candidate"),
    ("resolve-candidate-none", lambda g: g.registry.resolve(None), "candidate"),
    ("resolve-candidate-newline", lambda g: g.registry.resolve("user.city\nx"), "candidate"),
    ("resolve-candidate-surrogate", lambda g: g.registry.resolve(BAD), "candidate"),
    ("resolve-vector-nan", lambda g: g.registry.resolve("x.y", np.full(1024, np.nan)), "vector"),
    ("resolve-vector-wrong-dim", lambda g: g.registry.resolve("x.y", np.ones(3)), "vector"),
    ("resolve-vector-not-numeric", lambda g: g.registry.resolve("x.y", ["a", "b"]), "vector"),
    ("register-key-newline", lambda g: g.registry.register("a\nb"), "key"),
    ("register-key-int", lambda g: g.registry.register(5), "key"),
    ("register-vector-wrong-dim", lambda g: g.registry.register("x.y", np.ones(3)), "vector"),
    ("decide-candidate-surrogate", lambda g: g.registry.decide(BAD, None, 0.0, False), "candidate"),
    ("decide-candidate-control", lambda g: g.registry.decide("a\x00", None, 0.0, False), "candidate"),
    ("decide-shortlisted-unregistered", lambda g: g.registry.decide("x.y", "nope", 0.9, True), "shortlisted"),
    ("decide-shortlisted-int", lambda g: g.registry.decide("x.y", 5, 0.9, True), "shortlisted"),
    ("decide-score-nan", lambda g: g.registry.decide("x.y", "user.city", math.nan, False), "score"),
    ("decide-score-str", lambda g: g.registry.decide("x.y", "user.city", "0.9", False), "score"),
    ("decide-same-str", lambda g: g.registry.decide("x.y", "user.city", 0.9, "yes"), "same"),
    (
        "decide-vector-inf",
        lambda g: g.registry.decide("x.y", None, 0.0, False, np.full(1024, np.inf)),
        "vector",
    ),
    ("restore-keys-str", lambda g: g.registry.restore("abc", [], None), "keys"),
    ("restore-keys-int", lambda g: g.registry.restore([5], [], None), "keys"),
    ("restore-decisions-bad", lambda g: g.registry.restore(["a"], [{"bad": 1}], None), "decisions"),
    ("restore-threshold", lambda g: g.registry.restore(["a"], [], {"threshold": 5}), "threshold"),
    ("restore-config-list", lambda g: g.registry.restore(["a"], [], ["x"]), "config"),
    # patch interface
    ("patch-apply-not-a-patch", lambda g: PatchController().apply(g, ("k", "v")), "patch"),
    ("patch-lower-not-a-patch", lambda g: PatchController().lower(g, object()), "patch"),
    (
        "patch-apply-evidence-unknown",
        lambda g: PatchController().apply(g, Patch("k", "z"), "e999"),
        "evidence",
    ),
    ("patch-apply-graph-not-a-graph", lambda g: PatchController().apply(object(), Patch("k", "z")), "graph"),
]


def _named(arg: str) -> re.Pattern[str]:
    return re.compile(rf"\b{re.escape(arg)}\b")


@pytest.mark.parametrize(("call", "arg"), [(c, a) for _, c, a in CASES], ids=[i for i, _, _ in CASES])
def test_refused_call_names_the_argument_and_changes_nothing(tmp_path, call, arg):
    g = populated()
    before = saved(g, tmp_path / "before")
    stats, ops = g.stats(), list(g.operations())
    with pytest.raises((ValueError, TypeError), match=_named(arg)):
        call(g)
    assert saved(g, tmp_path / "after") == before
    assert (g.stats(), list(g.operations())) == (stats, ops)
    # and the graph keeps working: the next valid write lands where it would have
    assert g.observe("next") == f"e{g.stats()['evidence'] - 1}"


def test_observe_with_bad_time_leaves_no_phantom_evidence(tmp_path):
    g = ProvenanceGraph()
    with pytest.raises(ValueError, match=_named("time")):
        g.observe("x", time=123)
    assert g.stats()["evidence"] == 0 and g.seq == 0
    with pytest.raises(ValueError, match="evidence"):
        g.apply("accept", "k", "v", evidence="e0")  # the phantom id was never issued
    assert saved(g, tmp_path / "s") == saved(ProvenanceGraph(), tmp_path / "empty")


@pytest.mark.parametrize(
    ("kwargs", "arg"),
    [
        ({"key": ""}, "key"),
        ({"key": "a\nb"}, "key"),
        ({"key": BAD}, "key"),
        ({"new_value": 5}, "new_value"),
        ({"new_value": BAD}, "new_value"),
        ({"old_value": BAD}, "old_value"),
        ({"old_value": 5}, "old_value"),
        ({"op": "delete"}, "op"),
        ({"op": ["accept"]}, "op"),
        ({"marks_old_wrong": "yes"}, "marks_old_wrong"),
        ({"hard_commit": 1}, "hard_commit"),
    ],
)
def test_invalid_patch_names_the_field(kwargs, arg):
    fields = {"key": "k", "new_value": "v", **kwargs}
    with pytest.raises(ValueError, match=_named(arg)):
        Patch(**fields)


# ---------------------------------------------------------------- lone surrogates (issue 11, defect 2)

SURROGATE_CALLS: list[Case] = [
    ("observe-text", lambda g: g.observe(BAD), "text"),
    ("observe-source", lambda g: g.observe("x", source=BAD), "source"),
    ("observe-time", lambda g: g.observe("x", time=BAD), "time"),
    ("apply-key", lambda g: g.apply("accept", BAD, "v"), "key"),
    ("apply-value", lambda g: g.apply("accept", "k", BAD), "value"),
    ("apply-value-reject", lambda g: g.apply("reject", "k", BAD), "value"),
    ("apply-value-noop-logged", lambda g: g.apply("noop", "k", BAD), "value"),
    ("apply-value-failing-op", lambda g: g.apply("revoke", "empty", BAD), "value"),
    ("apply-evidence", lambda g: g.apply("accept", "k", "v", evidence=BAD), "evidence"),
    ("registry-resolve", lambda g: g.registry.resolve(BAD), "candidate"),
    ("registry-register", lambda g: g.registry.register(BAD), "key"),
    ("registry-decide", lambda g: g.registry.decide(BAD, None, 0.0, False), "candidate"),
    ("patch-new-value", lambda g: PatchController().apply(g, Patch("k", BAD)), "new_value"),
]


@pytest.mark.parametrize(
    ("call", "arg"), [(c, a) for _, c, a in SURROGATE_CALLS], ids=[i for i, _, _ in SURROGATE_CALLS]
)
def test_lone_surrogates_are_refused_and_save_still_works(tmp_path, call, arg):
    g = populated()
    with pytest.raises(ValueError, match=_named(arg)):
        call(g)
    g.save(tmp_path / "s")  # would raise UnicodeEncodeError forever had the string been admitted
    h = ProvenanceGraph.load(tmp_path / "s")
    assert h.to_bytes() == g.to_bytes()


def test_non_ascii_text_is_still_welcome(tmp_path):
    g = ProvenanceGraph()
    e = g.observe("Der Preis ist 30 000 €\n— gesagt am Montag 😀", source="ユーザー", time="2024-01-01T00:00")
    g.apply("accept", "préférence.café", "noir\u00a0serré 😀", evidence=e)
    g.apply("accept", "key with\u00a0nbsp and \u200bzero-width", "x")
    g.registry.resolve("utilisateur.ville_préférée")
    g.save(tmp_path / "s")
    h = ProvenanceGraph.load(tmp_path / "s")
    assert h.to_bytes() == g.to_bytes()
    assert h.cell("préférence.café").value == "noir\u00a0serré 😀"


# ---------------------------------------------------------------- control characters in keys (defect 3)


@pytest.mark.parametrize("key", CONTROL_KEYS, ids=[repr(k) for k in CONTROL_KEYS])
def test_keys_with_control_characters_are_refused_everywhere(tmp_path, key):
    g = populated()
    before = saved(g, tmp_path / "before")
    for op, value in (("accept", "v"), ("noop", None), ("revoke", None), ("contest", "v")):
        with pytest.raises(ValueError, match=_named("key")):
            g.apply(op, key, value)
    with pytest.raises(ValueError, match=_named("candidate")):
        g.registry.resolve(key)
    with pytest.raises(ValueError, match=_named("key")):
        g.registry.register(key)
    with pytest.raises(ValueError, match=_named("key")):
        Patch(key, "v")
    assert saved(g, tmp_path / "after") == before


# ---------------------------------------------------------------- blank keys (issue 41)

BLANK_KEYS = ["   ", " ", "\u3000", "\u00a0\u00a0", " \u2003 "]


@pytest.mark.parametrize("key", BLANK_KEYS, ids=[repr(k) for k in BLANK_KEYS])
def test_blank_keys_are_refused_everywhere(tmp_path, key):
    """A key of only spaces renders as nothing and names nothing a reader can ask for: refused by every
    writer, the batch one included (its column-wise check used to pass any ASCII key without a control
    character)."""
    from pmem.graph import WRITE_BATCH_SCHEMA

    g = populated()
    before = saved(g, tmp_path / "before")
    for op, value in (("accept", "v"), ("noop", None), ("revoke", None), ("contest", "v")):
        with pytest.raises(ValueError, match=r"key must not be blank \(only whitespace\)"):
            g.apply(op, key, value)
    with pytest.raises(ValueError, match=_named("candidate")):
        g.registry.resolve(key)
    with pytest.raises(ValueError, match=_named("key")):
        Patch(key, "v")
    row = {name: None for name in WRITE_BATCH_SCHEMA.names} | {"op": "accept", "key": key, "value": "v"}
    with pytest.raises(ValueError, match=r"row 0 \(key\).*must not be blank"):
        g.apply_batch(pa.Table.from_pylist([row], schema=WRITE_BATCH_SCHEMA))
    assert saved(g, tmp_path / "after") == before
    g.apply("accept", "a key with spaces", "v")  # spaces beside other text are a key's business
    assert g.cell("a key with spaces").value == "v"


@pytest.mark.parametrize("source", [None, "", 5])
def test_a_bad_source_is_refused_on_a_fresh_graph_and_after_the_cached_one(source):
    """observe caches the last source's code: neither the empty cache nor the cached source lets a bad
    one through."""
    g = ProvenanceGraph()
    with pytest.raises(ValueError, match=_named("source")):
        g.observe("first", source=source)
    g.observe("second", source="user")
    with pytest.raises(ValueError, match=_named("source")):
        g.observe("third", source=source)
    assert g.stats()["evidence"] == 1 and g.evidence("e0").source == "user"
