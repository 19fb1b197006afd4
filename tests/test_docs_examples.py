"""The Python examples of the README and the docs run, in order, and say what they claim (the rules:
``tests/doc_examples.py``, which a light install also runs as a script)."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest
from doc_examples import run_document

REPO = Path(__file__).resolve().parents[1]
#: the documents whose Python blocks run, each in its own namespace, and the claims each must check
CHECKED = {"docs/core.md": 12, "docs/memory.md": 12, "README.md": 5}


def _blocks(name: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", (REPO / name).read_text(encoding="utf-8"), re.S)


BLOCKS = _blocks("docs/core.md")


def test_the_examples_are_found() -> None:
    assert len(BLOCKS) >= 8


@pytest.mark.parametrize("name", sorted(CHECKED))
def test_the_examples_run_and_say_what_they_claim(name: str, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # an example saves a state file
    checked, _ = run_document(REPO / name, name)
    assert checked >= CHECKED[name]


# ---------------------------------------------------------------- the README's commands


def _readme_commands() -> tuple[list[str], list[str], list[str]]:
    """The README's shell commands: its ``bash`` blocks' lines, the ``pmem ...`` commands quoted inline,
    and its ``console`` lines (what runs on a cluster)."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    shell = [
        line.split("  # ", 1)[0].strip()
        for block in re.findall(r"```bash\n(.*?)```", text, re.S)
        for line in block.splitlines()
        if line.strip()
    ]
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    # a command with its arguments (``pmem ingest`` alone names the command), no placeholders
    inline = [
        c
        for c in re.findall(r"`(pmem [^`]+)`", prose)
        if len(c.split()) >= 3 and not re.search(r"[A-Z]{3,}|\.\.\.", c)
    ]
    console = [
        line.strip()
        for block in re.findall(r"```console\n(.*?)```", text, re.S)
        for line in block.splitlines()
        if line.strip()
    ]
    return shell, inline, console


def test_every_readme_command_runs(ray_cluster, tmp_path: Path) -> None:
    """The README's commands run as written, in a fresh folder that has what they name: the configs
    (``jobs/``), a stream (``events.jsonl``) and the state the library example saves. ``make`` lines are
    dry runs (the targets exist; CI runs ``make test`` itself); the cluster submission's config loads
    (the submission itself runs in ``make test-slow``: tests/runner/test_runner_job.py). The commands
    join the session's cluster through ``RAY_ADDRESS``, as a job submitted to a cluster does, rather than
    each starting a Ray of its own (the embedded mode has tests of its own: test_runner_interrupt)."""
    import json
    import os
    import subprocess
    import sys

    from pmem.runner import load_config

    shell, inline, console = _readme_commands()
    assert any(c.startswith("run=$(pmem sweep") for c in shell) and any("pmem ingest" in c for c in shell)
    (tmp_path / "jobs").symlink_to(REPO / "jobs")
    events = [{"text": f"The colour of box {i} is red."} for i in range(6)]
    (tmp_path / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    facts = [{"key": f"user_{i % 4}.city", "value": f"city {i}"} for i in range(20)]
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(facts), tmp_path / "facts.parquet")
    namespace: dict[str, object] = {}
    cwd = Path.cwd()
    os.chdir(tmp_path)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            for block in _blocks("README.md"):
                exec(compile(block, "README.md", "exec"), namespace)  # saves memory.arrow
    finally:
        os.chdir(cwd)
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "RAY_ADDRESS": ray_cluster.get_runtime_context().gcs_address,
    }
    script = "set -euo pipefail\n" + "\n".join(
        f"make -n -C {REPO} {c.split()[1]} >/dev/null" if c.startswith("make ") else c for c in shell + inline
    )
    done = subprocess.run(
        ["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert (run_dir / "report" / "report.html").is_file() and (tmp_path / "state.arrow").is_file()
    from pmem.graph import ProvenanceGraph

    assert ProvenanceGraph.load(tmp_path / "facts-state").head_value("user_3.city") == "city 19"  # --shards
    assert "the_project.budget" in done.stdout  # pmem inspect printed the key
    for line in console:
        assert line.startswith("ray job submit "), line
        config = line.split(" -- ", 1)[1].split()
        assert config[:2] == ["pmem", "sweep"]
        assert load_config(REPO / config[2]).benchmarks
