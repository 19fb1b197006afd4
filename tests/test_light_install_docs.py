"""The library on a light install (`pip install .`: no extra, so no Polars and no Ray) runs every
documented library call: the examples of docs/memory.md and docs/core.md, and ``as_of``, ``undo``,
``erase`` and ``apply_batch`` of both faces (issue 41: ``Memory.as_of`` raised ModuleNotFoundError for
polars, through apply_batch's key hashing).

The default suite makes the extras' modules unimportable in a child process (as
tests/test_cli_light_install.py does); the slow test installs the built wheel, without its extras, into
a fresh virtual environment whose only other packages are the core's dependencies.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from doc_examples import blocks, uses
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from pmem.cli import EXTRA_OF

REPO = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
DOCS = [REPO / "docs" / "memory.md", REPO / "docs" / "core.md"]
EXTRAS = ",".join(sorted(EXTRA_OF))
#: the documented calls beyond the examples' own, on both faces (run with the extras unimportable)
CALLS = """
import sys

for name in sys.argv[1].split(","):
    sys.modules[name] = None
for name in ("polars", "ray"):
    try:
        __import__(name)
    except ImportError:
        continue
    raise SystemExit(f"{name} is importable")

import pyarrow as pa

import pmem
from pmem.graph import WRITE_BATCH_SCHEMA

m = pmem.Memory()
m.add("The budget of the project is $30k.", time="2026-01-05")
r = m.add("The budget of the project is $50k.", time="2026-02-01")
assert m.as_of(2).cell("the_project.budget").value == "$30k"
assert m.as_of(time="2026-01-31").cell("the_project.budget").value == "$30k"
last = list(m.graph.operations("the_project.budget"))[-1].seq
assert m.undo(last).applied and m.get("the_project.budget").value == "$30k"
m.undo(m.graph.seq)  # the undo undone: $50k again
assert m.erase(r.evidence).changed == {"the_project.budget": ("$50k", "$30k")}
g = pmem.ProvenanceGraph()
rows = {
    "op": [None, "accept", None, "accept", "reject"],
    "text": ["budget is 30k", None, "budget is 50k", None, None],
    "source": [None] * 5,
    "time": [None] * 5,
    "key": [None, "budget", None, "budget", "budget"],
    "value": [None, "30k", None, "50k", None],
    "evidence": [None, 0, None, 1, None],
}
g.apply_batch(pa.table(rows, schema=WRITE_BATCH_SCHEMA))
assert g.head_value("budget") == "30k" and g.as_of(4).head_value("budget") == "50k"
import os
import tempfile

state = os.path.join(tempfile.mkdtemp(), "memory.arrow")
durable = pmem.Memory(path=state)  # every write journaled beside the state as it returns
durable.add("The city of Alice is Paris.")
durable.close()
assert pmem.Memory.load(state).get("alice.city").value == "Paris"
for name in ("mcp", "langgraph", "ray", "polars", "pydantic"):  # the server's and integrations' extras
    assert sys.modules.get(name) is None, f"the core imported {name}"
print("calls: ok")
"""


def _core_blocks_left_out() -> int:
    """core.md's blocks that read a state with Polars (a tool of the reader's, not the library)."""
    return sum(bool(uses(b, {"polars"}, {"pl"})) for b in blocks(REPO / "docs" / "core.md"))


def _check(done: subprocess.CompletedProcess[str]) -> None:
    assert done.returncode == 0, done.stdout + done.stderr
    counts = {
        name: (int(checked), int(left))
        for name, checked, left in re.findall(
            r"(\S+): (\d+) claims checked, (\d+) blocks left out", done.stdout
        )
    }
    assert set(counts) == {str(d) for d in DOCS}, done.stdout
    memory, core = counts[str(DOCS[0])], counts[str(DOCS[1])]
    assert memory[1] == 0 and core[1] == _core_blocks_left_out()  # only the Polars reading is left out
    assert memory[0] >= 12 and core[0] >= 12  # the claims tests/test_docs_examples.py asks of each
    assert "calls: ok" in done.stdout


def _run(python: str | Path, tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The documents' examples, then the calls, in ``tmp_path`` (the examples save states there)."""
    script = [str(python), str(HERE / "doc_examples.py"), "--without", EXTRAS, *map(str, DOCS)]
    docs = subprocess.run(script, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    calls = subprocess.run(
        [str(python), "-c", CALLS, EXTRAS], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300
    )
    return subprocess.CompletedProcess(
        script, docs.returncode or calls.returncode, docs.stdout + calls.stdout, docs.stderr + calls.stderr
    )


def test_the_documented_library_calls_run_without_the_extras(tmp_path: Path) -> None:
    assert _core_blocks_left_out() == 2  # the state files' examples read versions.arrow with Polars
    _check(_run(sys.executable, tmp_path, {**os.environ, "PYTHONPATH": str(REPO)}))  # this checkout's pmem


def _core_distributions() -> list[metadata.Distribution]:
    """The installed distributions the core needs (pmem's requirements without extras, recursively)."""
    found: dict[str, metadata.Distribution] = {}
    todo = [req for req in metadata.requires("pmem") or []]
    while todo:
        req = Requirement(todo.pop())
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        name = canonicalize_name(req.name)
        if name in found:
            continue
        found[name] = dist = metadata.distribution(req.name)
        todo += dist.requires or []
    return list(found.values())


def test_the_core_install_is_at_most_17_packages() -> None:
    """``pip install pmem`` brings the core's dependencies and nothing else: at most 15 (issue 42), and
    since issue 55 the two of recall's BM25 (bm25s, numpy only, and PyStemmer's stemmer)."""
    names = sorted(d.metadata["Name"] for d in _core_distributions())
    assert len(names) <= 17, names
    assert {"bm25s", "pystemmer"} <= {canonicalize_name(n) for n in names}
    assert not {"mcp", "langgraph", "ray", "pydantic", "polars"} & {canonicalize_name(n) for n in names}


@pytest.mark.slow
def test_a_fresh_install_without_extras_runs_the_documented_library_calls(tmp_path: Path) -> None:
    """The wheel, built from this checkout and installed with no extra into a fresh virtual
    environment; the core's dependencies are this environment's own (linked, not downloaded: the test
    runs offline), and nothing else is there."""
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md", "LICENSE"):
        (source / name).write_bytes((REPO / name).read_bytes())
    subprocess.run(
        ["cp", "-r", str(REPO / "pmem"), str(source / "pmem")], check=True, timeout=60
    )  # without the bundled datasets and config: the build skips what is absent
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]
    build = [*pip, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(tmp_path / "wheel")]
    subprocess.run([*build, str(source)], check=True, capture_output=True, timeout=600)
    (wheel,) = (tmp_path / "wheel").glob("pmem-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    site = Path(
        subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    deps = tmp_path / "deps"
    deps.mkdir()
    for dist in _core_distributions():
        for top in {Path(str(f)).parts[0] for f in dist.files or []} - {"..", "__pycache__"}:
            origin = Path(str(dist.locate_file(top)))
            if origin.exists() and not (deps / top).exists():
                (deps / top).symlink_to(origin)
    (site / "core-dependencies.pth").write_text(f"{deps}\n")
    install = [*pip, "--python", str(python), "install", "--no-deps", "--no-index", str(wheel)]
    subprocess.run(install, check=True, capture_output=True, timeout=300)
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the installed pmem, nothing else
    where = subprocess.run(
        [
            python,
            "-c",
            "import pmem, importlib.util as u; print(pmem.__file__, u.find_spec('polars'), u.find_spec('ray'))",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=clean,
        check=True,
    ).stdout.split()
    assert where[0].startswith(str(venv)) and where[1:] == ["None", "None"]
    _check(_run(python, tmp_path, clean))
