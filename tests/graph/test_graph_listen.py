"""The graph's write-listener hook (pmem.graph._ops._listen): every outermost public write is told once, with
its call, after it succeeded; a write's own inner calls and refused calls are not; nothing in pmem
observes writes by re-declaring the graph's writes in a subclass."""

from __future__ import annotations

import ast
from pathlib import Path

import pyarrow as pa
import pytest

from pmem.graph import WRITE_BATCH_SCHEMA, JournaledGraph, ProvenanceGraph
from pmem.graph._ops._listen import WRITES, WriteCall

PMEM = Path(__file__).resolve().parents[2] / "pmem"


class Recorder:
    """A listener keeping what it was told, in order ("writing" before each write)."""

    def __init__(self) -> None:
        self.told: list[WriteCall | str] = []

    def writing(self) -> None:
        self.told.append("writing")

    def written(self, call: WriteCall) -> None:
        self.told.append(call)


def calls(recorder: Recorder) -> list[WriteCall]:
    return [c for c in recorder.told if isinstance(c, WriteCall)]


def test_each_public_write_is_told_once_after_it_with_its_arguments_in_order() -> None:
    g = ProvenanceGraph()
    r = Recorder()
    g.listen(r)
    e = g.observe("budget 30k", "boss", "2024-01-02", "2024-01-01")
    g.apply("accept", "budget", "30k", e)
    premises = iter(["budget"])  # an iterator: the write and the listener both read it
    g.apply("accept", "plan", "go", None, depends_on=premises, alias="the plan")
    g.set_authority("boss", 3)
    g.undo(2)
    g.unmerge("the plan")
    g.erase(e)
    assert [c.name for c in calls(r)] == [
        "observe",
        "apply",
        "apply",
        "set_authority",
        "undo",
        "unmerge",
        "erase",
    ]
    assert r.told[::2] == ["writing"] * 7  # each write is announced before it is made
    assert calls(r)[0].args == ("budget 30k", "boss", "2024-01-02", "2024-01-01")
    assert calls(r)[2].args == ("accept", "plan", "go", None, ["budget"], "the plan", None)
    assert {c.name: len(c.args) for c in calls(r)} == {n: len(WRITES[n]) for n in {c.name for c in calls(r)}}


def test_a_writes_inner_calls_are_not_told_the_outer_call_stands_for_them() -> None:
    g = ProvenanceGraph()
    e = g.observe("a is x")
    g.apply("accept", "a", "x", e)
    g.apply("accept", "a", "y", g.observe("a is y"))
    r = Recorder()
    g.listen(r)
    g.undo(2)  # replays the key's later operations through apply
    n = 6
    batch = pa.table(
        {
            "op": [None, "accept"] * (n // 2),
            "key": [None, "b"] * (n // 2),
            "value": [None, "v"] * (n // 2),
            "evidence": [None] * n,
            "text": ["b is v", None] * (n // 2),
            "source": [None] * n,
            "time": [None] * n,
        },
        schema=WRITE_BATCH_SCHEMA,
    )
    g.apply_batch(batch)
    assert [c.name for c in calls(r)] == ["undo", "apply_batch"]
    assert calls(r)[1].args[0] is batch


def test_a_refused_write_is_not_told_as_written_and_the_listener_stays_attached() -> None:
    g = ProvenanceGraph()
    r = Recorder()
    g.listen(r)
    with pytest.raises(ValueError, match="unknown operation"):
        g.apply("overwrite", "a", "x")
    assert calls(r) == []
    g.observe("still told")
    assert [c.name for c in calls(r)] == ["observe"]
    g.listen(None)
    g.observe("not told")
    assert len(calls(r)) == 1


def test_a_copy_or_a_past_state_tells_the_originals_listener_nothing() -> None:
    g = ProvenanceGraph()
    r = Recorder()
    g.listen(r)
    g.apply("accept", "a", "x", g.observe("a is x"))
    g.apply("accept", "a", "y", g.observe("a is y"))
    told = len(r.told)
    assert g.as_of(2).head_value("a") == "x" and g.as_of().head_value("a") == "y"  # a replay of the writes
    for other in (ProvenanceGraph.from_bytes(g.to_bytes()), g.empty()):
        other.apply("accept", "a", "z", other.observe("a write of the copy"))
    assert len(r.told) == told


class Detaching(Recorder):
    """A listener that stops listening once told of a write."""

    def __init__(self, graph: ProvenanceGraph) -> None:
        super().__init__()
        self.graph = graph

    def written(self, call: WriteCall) -> None:
        super().written(call)
        self.graph.listen(None)


def test_a_listener_that_stops_listening_while_told_is_told_nothing_more() -> None:
    g = ProvenanceGraph()
    r = Detaching(g)
    g.listen(r)
    g.observe("told")
    g.observe("not told")
    assert [c.args[0] for c in calls(r)] == ["told"]


def test_a_journaled_graph_records_through_the_hook_and_reloads_equal(tmp_path: Path) -> None:
    state = tmp_path / "state.arrow"
    g = JournaledGraph.open(state)
    e = g.observe("budget 30k")
    g.apply("accept", "budget", "30k", e)
    g.apply("accept", "budget", "40k", g.observe("budget 40k"))
    g.undo(4)
    assert g.pending == 5  # two observe + apply pairs and the undo: the undo's own replay adds nothing
    g.commit()
    assert g.pending == 0
    assert ProvenanceGraph.load(state).to_bytes() == g.to_bytes()


def _writes_declared(cls: ast.ClassDef) -> set[str]:
    """The writes ``cls``'s body defines, as methods or by assignment."""
    names = set()
    for n in cls.body:
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(n.name)
        elif isinstance(n, ast.Assign):
            names.update(t.id for t in n.targets if isinstance(t, ast.Name))
    return names & set(WRITES)


def _graph_classes() -> dict[str, tuple[str, ast.ClassDef]]:
    """Every class in pmem that derives from ProvenanceGraph, at any depth: name -> (module, class)."""
    classes = {}
    for path in PMEM.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                bases = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases}
                classes[node.name] = (path.relative_to(PMEM).as_posix(), node, bases)
    graphs = {"ProvenanceGraph"}
    while more := {n for n, (_, _, bases) in classes.items() if bases & graphs} - graphs:
        graphs |= more
    return {n: classes[n][:2] for n in graphs - {"ProvenanceGraph"}}


#: ReadOnlyGraph sets each write to one that refuses (a replay has no writes to observe)
REFUSING = {"ReadOnlyGraph"}


def test_no_subclass_of_the_graph_in_pmem_re_declares_a_write() -> None:
    graphs = _graph_classes()
    assert {"JournaledGraph", "PartitionGraph", "ReadOnlyGraph"} <= set(graphs)
    offenders = [
        f"{module}:{name} {sorted(_writes_declared(cls))}"
        for name, (module, cls) in graphs.items()
        if name not in REFUSING and _writes_declared(cls)
    ]
    assert offenders == []


#: the modules that keep a ContextVar, and what it carries (no write report)
CONTEXT_VARIABLES = {"ingest/_calls.py": "the stream row a model call is made for, for the request log"}


def test_no_module_reports_writes_through_a_module_level_context_variable() -> None:
    found = {p.relative_to(PMEM).as_posix() for p in PMEM.rglob("*.py") if "ContextVar" in p.read_text()}
    assert found == set(CONTEXT_VARIABLES)
