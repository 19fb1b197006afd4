"""The optimized graph agrees with a naive, eager model written straight from DESIGN.md's table.

The graph closes superseded heads lazily and keeps sparse side tables for speed; this model keeps every
version as a plain dict and updates statuses eagerly. Random operation sequences (with a save/load in
the middle) must give the same versions, intervals and cells.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pmem.graph import OPS, ProvenanceGraph


class ReferenceGraph:
    def __init__(self) -> None:
        self.seq = 0
        self.versions: list[dict] = []
        self.head: dict[str, int] = {}
        self.alts: dict[str, list[int]] = {}

    def observe(self) -> None:
        self.seq += 1

    def _new(self, key, value, status, prev=None, alt_of=None) -> int:
        self.versions.append(
            {
                "key": key,
                "value": value,
                "status": status,
                "from": self.seq,
                "to": None,
                "prev": prev,
                "alt": alt_of,
            }
        )
        return len(self.versions) - 1

    def _close(self, vid, status) -> None:
        self.versions[vid]["status"] = status
        self.versions[vid]["to"] = self.seq

    def _close_alts(self, key) -> None:
        for a in self.alts.pop(key, []):
            self.versions[a]["to"] = self.seq

    def _rollback(self, key, retracted) -> None:
        p = self.versions[retracted]["prev"]
        while p is not None and self.versions[p]["status"] != "superseded":
            p = self.versions[p]["prev"]
        if p is None:
            self.head.pop(key, None)
        else:
            self.versions[p]["status"], self.versions[p]["to"] = "active", None
            self.head[key] = p

    def apply(self, op, key, value) -> bool:
        self.seq += 1
        h = self.head.get(key)
        hv = self.versions[h]["value"] if h is not None else None
        if op == "accept":
            if h is not None and value == hv:
                return True
            if h is not None:
                self._close(h, "superseded")
                self._close_alts(key)
            self.head[key] = self._new(key, value, "active", prev=h)
            return True
        if op == "noop":
            # a value other than the head's is no support for the head: a failed precondition
            return h is None or value is None or value == hv
        if h is None:
            return False
        if op == "reject":
            self._close(h, "contradicted")
            self._close_alts(key)
            if value is not None:
                self.head[key] = self._new(key, value, "active", prev=h)
            else:
                self._rollback(key, h)
            return True
        if op == "revoke":
            if value is not None and value != hv:
                return False
            self._close(h, "revoked")
            self._close_alts(key)
            self._rollback(key, h)
            return True
        alts = self.alts.get(key, [])
        if op == "contest":
            if value == hv or any(self.versions[a]["value"] == value for a in alts):
                return True
            self.alts[key] = [*alts, self._new(key, value, "alternative", alt_of=h)]
            self.versions[h]["status"] = "contested"
            return True
        # resolve
        if self.versions[h]["status"] != "contested":
            return False
        winner = h if value == hv else next((a for a in alts if self.versions[a]["value"] == value), None)
        if winner is None:
            return False
        for loser in (h, *alts):
            if loser != winner:
                self._close(loser, "contradicted")
        self.alts.pop(key, None)
        self.versions[winner]["status"] = "active"
        if winner != h:
            self.versions[winner]["prev"] = h
            self.head[key] = winner
        return True

    def view(self, key):
        vs = [(v["value"], v["status"], v["from"], v["to"]) for v in self.versions if v["key"] == key]
        h = self.head.get(key)
        if h is None:
            cell = (None, "empty", [])
        else:
            cell = (
                self.versions[h]["value"],
                self.versions[h]["status"],
                [self.versions[a]["value"] for a in self.alts.get(key, [])],
            )
        return vs, cell


def graph_view(g: ProvenanceGraph, key):
    vs = [(v.value, v.status, v.valid_from, v.valid_to) for v in g.versions(key)]
    c = g.cell(key)
    return vs, (c.value, c.status, c.alternatives)


ops = st.lists(
    st.tuples(st.sampled_from(OPS), st.sampled_from("abc"), st.one_of(st.none(), st.sampled_from("wxyz"))),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(ops, st.integers(min_value=0, max_value=60))
def test_graph_matches_reference(seq, reload_at):
    g, ref = ProvenanceGraph(), ReferenceGraph()
    for i, (op, key, value) in enumerate(seq):
        if op in ("accept", "contest", "resolve") and value is None:
            value = "wxyz"[i % 4]
        if i == reload_at:
            g = ProvenanceGraph.from_bytes(g.to_bytes())
        g.observe(f"e{i}")
        ref.observe()
        applied = ref.apply(op, key, value)
        assert g.apply(op, key, value).applied == applied
        for k in "abc":
            if k in g:
                assert graph_view(g, k) == ref.view(k), (i, op, key, value)
