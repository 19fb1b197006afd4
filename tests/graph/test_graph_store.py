"""Each of the graph's columns has one owner, the store's column group of its node kind (issues 43, 57):
outside a group's module no module reads or writes one of its columns (nor sets any attribute of a store
or a group; the store composing them included), no module reads a private attribute of a graph class
another module defines (found with ``ast`` over every module of ``pmem``), a graph keeps no column of its
own, and the store's accept writes what the general operations write."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pmem
from pmem.graph import ProvenanceGraph
from pmem.graph._ops._codes import ACCEPT, ACTIVE, NONE, SUPERSEDED
from pmem.graph._ops._store import COLUMNS, GROUP_COLUMNS, GraphStore

ROOT = Path(pmem.__file__).parent
STORE = ROOT / "graph" / "_ops" / "_store"
#: each group's module: the one place its columns are read and written
GROUP_MODULES = {
    STORE / "_evidence.py": "EvidenceColumns",
    STORE / "_keys.py": "KeyColumns",
    STORE / "_versions.py": "VersionColumns",
    STORE / "_edges.py": "EdgeColumns",
    STORE / "_log.py": "OperationLog",
    STORE / "_authority.py": "Authority",
}
#: the composer: ``self`` there is a store
COMPOSER = STORE / "_graphstore.py"
#: the modules that define a graph class, whose private attributes no other module may read
GRAPH_CLASSES = {
    "graph/_graph.py": "ProvenanceGraph",
    "graph/_ops/_store/_graphstore.py": "GraphStore",
    **{str(path.relative_to(ROOT)): cls for path, cls in GROUP_MODULES.items()},
}
#: what a store's own columns would be: a group's, or the store's own seq
STORE_CLASSES = ("GraphStore",)
GROUP_CLASSES = tuple(GROUP_MODULES.values())


def _is_store(node: ast.expr, stores: set[str]) -> bool:
    """Whether ``node`` is a graph's store or one of its groups: ``<x>.storage``, ``<x>._store``,
    ``<store>.<group>``, or a name bound to one."""
    if isinstance(node, ast.Attribute) and node.attr in ("storage", "_store"):
        return True
    if isinstance(node, ast.Attribute) and node.attr in GROUP_COLUMNS and _is_store(node.value, stores):
        return True
    return isinstance(node, ast.Name) and node.id in stores


def _bound(target: ast.expr, value: ast.expr, stores: set[str]) -> list[str]:
    """The names ``target = value`` binds to a store or a group (tuples taken apart)."""
    if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple) and len(target.elts) == len(value.elts):
        return [n for t, v in zip(target.elts, value.elts, strict=True) for n in _bound(t, v, stores)]
    if not isinstance(target, ast.Name):
        return []
    made = isinstance(value, ast.Call) and getattr(value.func, "id", None) in STORE_CLASSES + GROUP_CLASSES
    return [target.id] if made or _is_store(value, stores) else []


def _store_names(scope: ast.AST, path: Path | None = None) -> set[str]:
    """Names bound in ``scope`` to a store or a group: ``s = g.storage``, ``keys = s.keys``,
    ``s = GraphStore()``, ``s: GraphStore``; ``self`` in the composer."""
    names: set[str] = {"self"} if path == COMPOSER else set()
    for _ in range(2):  # a name bound from a name bound earlier
        for node in ast.walk(scope):
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                names.update(_bound(node.targets[0], node.value, names))
            elif isinstance(node, ast.arg):
                annotation = ast.unparse(node.annotation or ast.Constant(""))
                if any(cls in annotation for cls in STORE_CLASSES + GROUP_CLASSES):
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
        stores = _store_names(scope, path)
        for node in ast.walk(scope):
            if not isinstance(node, ast.Attribute) or not _is_store(node.value, stores):
                continue
            own = path == COMPOSER and isinstance(node.value, ast.Name) and node.value.id == "self"
            if node.attr in COLUMNS or (isinstance(node.ctx, ast.Store | ast.Del) and not own):
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
    """Every module of the package but the groups' own, and the benchmarks (``pmem perf`` runs them)."""
    benchmarks = sorted((ROOT.parent / "benchmarks").glob("*.py"))
    return [p for p in sorted(ROOT.rglob("*.py")) if p not in GROUP_MODULES] + benchmarks


def test_no_module_but_a_groups_own_touches_its_columns() -> None:
    assert COMPOSER in _modules()  # the store composing the groups keeps to their operations too
    assert [line for p in _modules() for line in column_reach_ins(p)] == []


def test_each_column_has_one_group() -> None:
    groups = list(GROUP_COLUMNS.values())
    assert sum(len(g) for g in groups) == len(COLUMNS)
    assert set(vars(GraphStore())) == {"seq", *GROUP_COLUMNS}


def test_no_module_reads_a_private_attribute_of_a_graph_another_module_defines() -> None:
    assert [line for p in _modules() for line in private_reads(p)] == []


def test_the_checks_find_what_they_look_for(tmp_path: Path) -> None:
    """The finders are not vacuous: each flags the reach-in it exists for."""
    sample = tmp_path / "probe.py"
    sample.write_text(
        "def f(graph, store):\n"
        "    s = graph.storage\n"
        "    a = s.versions.v_value[0]\n"
        "    keys, log = s.keys, s.log\n"
        "    b = keys.kid, log.op_code\n"
        "    graph.storage.seq = 3\n"
        "    return graph._store.keys.k_head, graph._last_ev\n",
        encoding="utf-8",
    )
    columns = column_reach_ins(sample)
    assert [line.split(": ", 1)[1] for line in columns] == [
        "s.versions.v_value",
        "keys.kid",
        "log.op_code",
        "graph.storage.seq",
        "graph._store.keys.k_head",
    ]
    assert sorted(line.split(": ", 1)[1] for line in private_reads(sample)) == [
        "graph._last_ev",
        "graph._store",
    ]


def test_a_graph_keeps_no_column_of_its_own() -> None:
    graph = ProvenanceGraph(authority={"boss": 2})
    graph.apply("accept", "budget", "$30k", evidence=graph.observe("budget is $30k", source="boss"))
    own = set(vars(graph))
    assert own.isdisjoint(f"_{name}" for name in COLUMNS)
    assert list(graph.storage.keys.names()) == ["budget"] and graph.storage.authority.level("boss") == 2


def _columns(store: GraphStore) -> dict[str, object]:
    """Every column of every group of ``store`` but the texts, by ``group.column``."""
    return {
        f"{group}.{name}": value
        for group in GROUP_COLUMNS
        for name, value in vars(getattr(store, group)).items()
        if name in COLUMNS and name != "ev_text"
    }


def test_accept_writes_what_append_version_set_head_and_log_write() -> None:
    """``GraphStore.accept`` writes an accept the graph has weighed in a few group calls; the general
    operations are the reference it is kept equal to: a first value, a new value over a head, a new value
    over a contested head (closed eagerly with its alternative, and the key's newest version is not the
    head)."""
    accepting, general = GraphStore(), GraphStore()
    for store in (accepting, general):
        store.keys.new("k")
        store.keys.new("j")

    def accept_generally(kid: int, value: str, ev: int) -> None:
        seq, head = general.next_seq(), general.keys.head(kid)
        if general.keys.has_alternatives(kid):
            general.versions.close(head, SUPERSEDED, seq)
            general.close_open_alternatives(kid, seq)
        vid = general.append_version(kid, value, ACTIVE, seq, ev, head)
        general.keys.set_head(kid, vid)
        general.log.append(seq, ACCEPT, ACCEPT, kid, ev, True, vid, created=True)

    for kid, value, ev in [(0, "a", 0), (0, "b", 1), (1, "x", NONE)]:
        accepting.accept(kid, accepting.keys.head(kid), value, ev)
        accept_generally(kid, value, ev)
    for store in (accepting, general):
        store.add_alternative(0, "alt", store.next_seq(), 2)
    accepting.accept(0, accepting.keys.head(0), "c", 3)
    accept_generally(0, "c", 3)
    assert general.chain(0) == accepting.chain(0) == [4, 3, 1, 0] and general.keys.head(0) == 4
    assert general.seq == accepting.seq
    assert _columns(accepting) == _columns(general)


def test_the_graph_decides_what_an_accept_writes() -> None:
    """The store's accept writes whatever it is given; the graph keeps a repeated value as support, a
    late fact below the head, and a lower-ranked source's value as a contest."""
    graph = ProvenanceGraph(authority={"boss": 2, "intern": 1})
    boss = graph.observe("budget is $30k", source="boss")
    graph.apply("accept", "budget", "$30k", evidence=boss)
    assert graph.apply("accept", "budget", "$30k", evidence=boss).reason is not None  # support
    intern = graph.observe("budget is $50k", source="intern")
    assert graph.apply("accept", "budget", "$50k", evidence=intern).op == "contest"
    assert graph.cell("budget").value == "$30k" and graph.storage.versions.count() == 2
    dated = ProvenanceGraph()
    dated.apply("accept", "city", "Porto", evidence=dated.observe("Porto", valid_time="2026-03-01"))
    dated.apply("accept", "city", "Lisbon", evidence=dated.observe("Lisbon", valid_time="2026-01-01"))
    assert dated.cell("city").value == "Porto"  # the late fact entered the history below the head
