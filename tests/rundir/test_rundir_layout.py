"""The run directory's layout is pmem.rundir's alone: every folder and file name of ``runs/<id>/`` is a
literal there and nowhere else in ``pmem/``, and a file's sha256 is computed by one function."""

from __future__ import annotations

import ast
import hashlib
import io
from pathlib import Path

import pmem
from pmem import rundir
from pmem._atomic import file_sha256
from pmem.rundir import GRAPH_STATE, STORE_STATE, PlanCell, state_path, states_of

ROOT = Path(pmem.__file__).parent

#: every folder and file name of a run directory (written out: a name dropped from pmem.rundir must fail)
RUN_DIR_NAMES = {
    "results",
    "writes",
    "requests",
    "histories",
    "judgments",
    "calibration",
    "states",
    "_commits",
    "_staging",
    "cache",
    "logs",
    "report",
    "run.toml",
    "plan.json",
    "summary.json",
    "responses.sqlite",
    ".lock",
}

#: names nothing but a run directory uses: no string literal outside pmem/rundir may be one, in any role
RUN_DIR_ONLY = {
    "judgments",
    "states",
    "_commits",
    "_staging",
    "run.toml",
    "plan.json",
    "summary.json",
    "responses.sqlite",
}

#: (folder of pmem/, name) where a generic name builds a path that is not in a run directory
ALLOWED = {
    # an ingest's working folder has a layout of its own (pmem/ingest/_workdir.py): requests/, .lock
    ("ingest", "requests"),
    ("ingest", ".lock"),
}

#: calls whose argument is a path (component): a run-dir name there builds a path
_PATH_CALLS = {"Path", "join", "joinpath", "glob", "rglob", "mkdir"}


def test_the_names_are_defined_in_rundir() -> None:
    defined = {
        *rundir.DATASETS,
        rundir.STATES,
        rundir.COMMITS,
        rundir.STAGING,
        rundir.CACHE,
        rundir.LOGS,
        rundir.REPORT,
        rundir.RUN_TOML,
        rundir.PLAN,
        rundir.SUMMARY,
        rundir.RESPONSE_CACHE,
        rundir.LOCK,
    }
    assert defined == RUN_DIR_NAMES


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def _builds_a_path(node: ast.Constant, parent: ast.AST | None) -> bool:
    if isinstance(parent, ast.BinOp) and isinstance(parent.op, ast.Div):
        return True  # root / "results"
    if isinstance(parent, ast.Call) and node in parent.args:
        f = parent.func
        name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
        return name in _PATH_CALLS
    return False


def run_dir_literals(source: str) -> list[tuple[int, str]]:
    """(line, name) of each string literal in ``source`` that names a run-directory folder or file:

    - a name only run directories use (``_commits``, ``plan.json``, ...), anywhere;
    - any run-dir name as a path component (``root / "results"``, ``glob("results")``);
    - a relative path into a run directory (``"histories/failed-..."``; ``"results/ is missing"`` is prose).

    Docstrings are prose; dict keys, column names and messages that merely share a word are not flagged.
    """
    tree = ast.parse(source)
    docs = _docstrings(tree)
    parents = {id(c): p for p in ast.walk(tree) for c in ast.iter_child_nodes(p)}
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Constant) or not isinstance(node.value, str) or id(node) in docs:
            continue
        text = node.value
        for name in RUN_DIR_NAMES:
            exact = text == name
            as_folder = text.startswith(f"{name}/") and not text[len(name) + 1 : len(name) + 2].isspace()
            if as_folder or (exact and (name in RUN_DIR_ONLY or _builds_a_path(node, parents.get(id(node))))):
                found.append((node.lineno, name))
    return found


def test_the_checker_finds_run_dir_literals() -> None:
    """The scan below is only as good as this: it must see each way a name turns up in code."""
    source = '''
"""results/ and _commits/ in a docstring are prose."""
from pathlib import Path
COMMITS = "_commits"
def f(root, uid, run):
    """states/ in a function's docstring."""
    a = root / "histories" / f"failed-{uid}.parquet"
    b = f"histories/failed-{uid}.parquet"
    c = list(root.glob("results"))
    d = root / "plan.json"
    e = run.frame("results")            # a dataset by name: not a path
    g = {"results": 1}["results"]       # another JSON's key
    h = "requests/ is missing: not reported"
    return Path("states")
'''
    assert sorted(run_dir_literals(source)) == [
        (4, "_commits"),
        (7, "histories"),
        (8, "histories"),
        (9, "results"),
        (10, "plan.json"),
        (14, "states"),
    ]


def test_run_dir_names_are_literals_only_in_rundir() -> None:
    offenders = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT)
        if rel.parts[0] == "rundir":
            continue
        for line, name in run_dir_literals(path.read_text(encoding="utf-8")):
            if (rel.parts[0], name) not in ALLOWED:
                offenders.append(f"pmem/{rel.as_posix()}:{line}: {name!r}")
    assert not offenders, "name these through pmem.rundir:\n" + "\n".join(offenders)


# -- one file hash ------------------------------------------------------------------------------------------
#: functions that hash bytes read from a file without pmem._atomic.file_sha256, and why that is right
HASHES_BYTES_IT_HOLDS = {
    # reads the checkpoint once and checks exactly the bytes it then returns
    ("ingest/_checkpoint.py", "_read_checkpoint"),
}


def _own_nodes(fn: ast.AST) -> list[ast.AST]:
    """The nodes of a function, without those of the functions defined inside it."""
    out, todo = [], list(ast.iter_child_nodes(fn))
    while todo:
        node = todo.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            continue
        out.append(node)
        todo.extend(ast.iter_child_nodes(node))
    return out


def _call_names(node: ast.Call) -> set[str]:
    """``f``, or ``.m`` and (on a module name) ``mod.m``."""
    f = node.func
    if isinstance(f, ast.Attribute):
        return {f".{f.attr}"} | ({f"{f.value.id}.{f.attr}"} if isinstance(f.value, ast.Name) else set())
    return {f.id} if isinstance(f, ast.Name) else set()


def file_hashers(source: str) -> list[str]:
    """Names of the functions in ``source`` that compute a sha256 and read a file."""
    out = []
    for fn in ast.walk(ast.parse(source)):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        calls = {c for n in _own_nodes(fn) if isinstance(n, ast.Call) for c in _call_names(n)}
        hashes = bool(calls & {"hashlib.sha256", "hashlib.file_digest", "hashlib.new"})
        reads = bool(calls & {"open", ".open", ".read_bytes"})
        if hashes and reads:
            out.append(fn.name)
    return out


def test_the_hash_checker_finds_file_hashers() -> None:
    source = """
import hashlib
def a(p):
    with open(p, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()
def b(p):
    h = hashlib.sha256()
    with p.open("rb") as f:
        h.update(f.read())
    return h.hexdigest()
def c(text):
    return hashlib.sha256(text.encode()).hexdigest()
def d(p):
    return hashlib.sha256(p.read_bytes()).hexdigest()
"""
    assert file_hashers(source) == ["a", "b", "d"]


def test_one_function_computes_a_files_sha256() -> None:
    found = {
        (path.relative_to(ROOT).as_posix(), name)
        for path in ROOT.rglob("*.py")
        for name in file_hashers(path.read_text(encoding="utf-8"))
    }
    assert found - HASHES_BYTES_IT_HOLDS == {("_atomic.py", "file_sha256")}


def test_file_sha256_whole_prefix_and_copy(tmp_path: Path) -> None:
    data = bytes(range(256)) * 9000  # more than one block
    path = tmp_path / "f.bin"
    path.write_bytes(data)
    assert file_sha256(path) == hashlib.sha256(data).hexdigest()
    assert file_sha256(path, limit=1000) == hashlib.sha256(data[:1000]).hexdigest()
    assert file_sha256(path, limit=len(data) + 5) == hashlib.sha256(data).hexdigest()
    sink = io.BytesIO()
    assert file_sha256(path, copy_to=sink) == hashlib.sha256(data).hexdigest()
    assert sink.getvalue() == data


# -- state paths and plan cells ---------------------------------------------------------------------------
def test_state_path_is_the_runners_naming(tmp_path: Path) -> None:
    uid = "0123456789abcdef0123"
    assert state_path("pmem", "lme/s/q 1", uid, GRAPH_STATE) == "states/pmem/lme__s__q_1.0123456789.arrow"
    assert state_path("mem0", "h", uid, STORE_STATE) == "states/mem0/h.0123456789.tar"
    for arm in ("pmem", "raw"):
        p = tmp_path / state_path(arm, "lme/s/q 1", uid, GRAPH_STATE)
        p.parent.mkdir(parents=True)
        p.write_bytes(b"")
    (tmp_path / state_path("pmem", "lme/s/q 10", uid, GRAPH_STATE)).write_bytes(b"")  # another history
    assert {a: p.name for a, p in states_of(tmp_path, "lme/s/q 1").items()} == {
        "pmem": "lme__s__q_1.0123456789.arrow",
        "raw": "lme__s__q_1.0123456789.arrow",
    }


def test_plan_cells_keep_their_json() -> None:
    """plan.json as the runner wrote it before PlanCell: the optional fields only where an arm did not run."""
    assert PlanCell("b", "s", "pmem", "m", histories=3).to_json() == {
        "benchmark": "b",
        "subset": "s",
        "arm": "pmem",
        "model": "m",
        "histories": 3,
    }
    cell = PlanCell("b", "s", "mem0", "m", histories=0, not_run="needs a model", skipped=3)
    assert list(cell.to_json().items())[-2:] == [("not_run", "needs a model"), ("skipped", 3)]
    assert {"benchmark": str, "subset": str, "arm": str, "model": str, "histories": int} == rundir.PLAN_FIELDS
