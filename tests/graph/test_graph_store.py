"""The graph's columns have one owner, GraphStore (issue 43): outside ``pmem/graph/_store.py`` no module
reads or writes a column of a store (nor sets any attribute of one), no module reads a private attribute of
a graph that another module defines (found with ``ast`` over every module of ``pmem``), a graph keeps no
column of its own, and the write's inlined fast path writes what the general operations write."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pmem
from pmem.graph import ProvenanceGraph
from pmem.graph._codes import ACCEPT, ACTIVE, NONE, SUPERSEDED
from pmem.graph._store import COLUMNS, GraphStore

ROOT = Path(pmem.__file__).parent
STORE = ROOT / "graph" / "_store.py"
#: the modules that define a graph class, whose private attributes no other module may read
GRAPH_CLASSES = {"graph/_graph.py": "ProvenanceGraph", "graph/_store.py": "GraphStore"}


def _is_store(node: ast.expr, stores: set[str]) -> bool:
    """Whether ``node`` is a graph's store: ``<x>.storage``, ``<x>._store``, or a name bound to one."""
    if isinstance(node, ast.Attribute) and node.attr in ("storage", "_store"):
        return True
    return isinstance(node, ast.Name) and node.id in stores


def _store_names(scope: ast.AST) -> set[str]:
    """Names bound in ``scope`` to a store: ``s = g.storage``, ``s = GraphStore()``, ``s: GraphStore``."""
    names: set[str] = set()
    for node in ast.walk(scope):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            value = node.value
            made = isinstance(value, ast.Call) and getattr(value.func, "id", None) == "GraphStore"
            if made or _is_store(value, set()):
                names.add(node.targets[0].id)
        elif isinstance(node, ast.arg) and "GraphStore" in ast.unparse(node.annotation or ast.Constant("")):
            names.add(node.arg)
    return names


def _name(path: Path) -> str:
    """``path`` as the findings name it: relative to the package (a file outside it: its own name)."""
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name


def column_reach_ins(path: Path) -> list[str]:
    """Each place of ``path`` that touches a store's column or sets a store's attribute."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    scopes = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    for scope in [tree, *scopes]:
        stores = _store_names(scope)
        for node in ast.walk(scope):
            if not isinstance(node, ast.Attribute) or not _is_store(node.value, stores):
                continue
            if node.attr in COLUMNS or isinstance(node.ctx, ast.Store | ast.Del):
                found.append(f"{_name(path)}:{node.lineno}: {ast.unparse(node)}")
    return sorted(set(found))


@functools.cache
def _privates(relative: str, cls: str) -> frozenset[str]:
    """The private attributes and methods class ``cls`` of module ``relative`` defines."""
    tree = ast.parse((ROOT / relative).read_text(encoding="utf-8"))
    (node,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls]
    out = set()
    for n in ast.walk(node):
        if isinstance(n, ast.FunctionDef) and n.name.startswith("_") and not n.name.startswith("__"):
            out.add(n.name)
        if not isinstance(n, ast.Attribute) or not isinstance(n.value, ast.Name) or n.value.id != "self":
            continue
        if n.attr.startswith("_") and not n.attr.startswith("__") and isinstance(n.ctx, ast.Store):
            out.add(n.attr)
    return frozenset(out)


def private_reads(path: Path) -> list[str]:
    """Each place of ``path`` that reads a private attribute of a graph class another module defines."""
    relative = _name(path)
    forbidden = frozenset().union(*(_privates(m, c) for m, c in GRAPH_CLASSES.items() if m != relative))
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        f"{relative}:{node.lineno}: {ast.unparse(node)}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and node.attr in forbidden
        and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
        and not (isinstance(node.value, ast.Call) and getattr(node.value.func, "id", None) == "super")
    ]


def _modules() -> list[Path]:
    return [p for p in sorted(ROOT.rglob("*.py")) if p != STORE]


def test_no_module_but_the_store_touches_a_column() -> None:
    assert [line for p in _modules() for line in column_reach_ins(p)] == []


def test_no_module_reads_a_private_attribute_of_a_graph_another_module_defines() -> None:
    assert [line for p in _modules() for line in private_reads(p)] == []


def test_the_checks_find_what_they_look_for(tmp_path: Path) -> None:
    """The finders are not vacuous: each flags the reach-in it exists for."""
    sample = tmp_path / "probe.py"
    sample.write_text(
        "def f(graph, store):\n"
        "    s = graph.storage\n"
        "    a = s.v_value[0]\n"
        "    graph.storage.seq = 3\n"
        "    return graph._store.k_head, graph._last_ev\n",
        encoding="utf-8",
    )
    columns = column_reach_ins(sample)
    assert [line.split(": ", 1)[1] for line in columns] == [
        "s.v_value",
        "graph.storage.seq",
        "graph._store.k_head",
    ]
    assert sorted(line.split(": ", 1)[1] for line in private_reads(sample)) == [
        "graph._last_ev",
        "graph._store",
    ]


def test_a_graph_keeps_no_column_of_its_own() -> None:
    graph = ProvenanceGraph(authority={"boss": 2})
    graph.apply("accept", "budget", "$30k", evidence=graph.observe("budget is $30k", source="boss"))
    own = set(vars(graph))
    assert own.isdisjoint(f"_{name}" for name in vars(graph.storage))
    assert graph.storage.key_names == ["budget"] and graph.storage.authority == {"boss": 2}


def test_accept_writes_what_append_version_set_head_and_log_write() -> None:
    """``GraphStore.accept`` inlines the three for the write's hot path; the general operations are the
    reference it is kept equal to: a first value, a new value over a head, a new value over a contested
    head (closed eagerly with its alternative, and the key's newest version is not the head)."""
    inlined, general = GraphStore(), GraphStore()
    for store in (inlined, general):
        store.new_key("k")
        store.new_key("j")

    def accept_generally(name: str, value: str, ev: int) -> None:
        kid = general.key_id(name)
        assert kid is not None
        seq, head = general.next_seq(), general.head(kid)
        if general.has_alternatives(kid):
            general.close(head, SUPERSEDED, seq)
            general.close_open_alternatives(kid, seq)
        vid = general.append_version(kid, value, ACTIVE, seq, ev, head)
        general.set_head(kid, vid)
        general.log(seq, ACCEPT, ACCEPT, kid, ev, True, vid, created=True)

    for name, value, ev in [("k", "a", 0), ("k", "b", 1), ("j", "x", NONE)]:
        assert inlined.accept(name, value, ev)
        accept_generally(name, value, ev)
    for store in (inlined, general):
        store.add_alternative(0, "alt", store.next_seq(), 2)
    assert inlined.accept("k", "c", 3)
    accept_generally("k", "c", 3)
    assert general.chain(0) == inlined.chain(0) == [4, 3, 1, 0] and general.head(0) == 4
    same = {name: value for name, value in vars(general).items() if name != "ev_text"}
    assert {name: value for name, value in vars(inlined).items() if name != "ev_text"} == same
