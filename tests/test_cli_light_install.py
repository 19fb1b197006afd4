"""A light install (`pip install pmem`, no `eval` extra): the library and `pmem inspect` work, and a
command that needs the evaluation system says which extra to install, in one line, exit 2 (issue 30)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pmem.cli import EXTRA_OF

REPO = Path(__file__).resolve().parents[1]
#: run a `pmem` command with every module of the extras made unimportable, as on a light install
LIGHT = (
    "import sys\n"
    f"for m in {sorted(EXTRA_OF)!r}: sys.modules[m] = None\n"
    "from pmem.cli import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


def _light(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", LIGHT, *argv], capture_output=True, text=True, cwd=REPO, timeout=300
    )


def test_the_library_memory_and_inspect_need_no_extra(tmp_path: Path) -> None:
    code = (
        LIGHT.split("from pmem.cli")[0]
        + "import pmem\nm = pmem.Memory()\nm.add('The city of Alice is Paris.')\n"
        + "assert [c.value for c in m.search('Where does Alice live?', k=1)] == ['Paris']\n"
        # past 64 cells the index would switch to SciPy's sparse product, which this install lacks
        + "for i in range(100): m.add(f'The city of Person{i} is Town{i}.')\n"
        + "assert [c.value for c in m.search('Where does Person7 live?', k=1)] == ['Town7']\n"
        + "g = pmem.ProvenanceGraph()\n"
        + "g.apply('accept', 'a.b', 'x', evidence=g.observe('a b is x'))\n"
        + f"g.save({str(tmp_path / 's.arrow')!r})\nprint(pmem.ProvenanceGraph.load({str(tmp_path / 's.arrow')!r}).cell('a.b').value)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "x", done.stderr
    shown = _light("inspect", str(tmp_path / "s.arrow"))
    assert shown.returncode == 0 and "a.b = x" in shown.stdout, shown.stderr


@pytest.mark.parametrize(
    ("argv", "module"),
    [
        (["sweep", "jobs/quickstart.toml", "--out", "{tmp}"], "ray"),
        (["demo", "--out", "{tmp}"], "polars"),  # the demo imports its report first
        (["report", "reports/quickstart"], "polars"),
        (["ingest", "README.md", "--out", "{tmp}/x.arrow"], "ray"),
    ],
)
def test_a_command_of_the_evaluation_system_names_its_extra(
    argv: list[str], module: str, tmp_path: Path
) -> None:
    done = _light(*(a.replace("{tmp}", str(tmp_path)) for a in argv))
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.strip().splitlines() == [
        f"pmem {argv[0]} needs the evaluation system, which this install lacks (no module {module!r}): "
        "pip install 'pmem[eval]'"
    ]
    assert list(tmp_path.iterdir()) == []  # refused before anything was written
