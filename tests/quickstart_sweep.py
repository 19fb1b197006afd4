"""`pmem sweep` run in the test process on the session's cluster, and the quickstart config it sweeps.

The quickstart's first histories (``--limit 1``: 84 histories x arms, every arm) are swept once per test
process by the ``quickstart_first_run`` fixture (tests/conftest.py): the tests of what the command prints
(tests/runner/test_runner_cli_sweep.py) and of the run directory it leaves (tests/rundir/test_rundir_sweep.py)
read the same run. Both modules are in one xdist group, so ``make test`` sweeps it once.
"""

from __future__ import annotations

import argparse
import contextlib
import io
from dataclasses import dataclass
from pathlib import Path

import pytest

from pmem.runner._cli_sweep import add_arguments
from pmem.runner._cli_sweep import run as cli_run

REPO = Path(__file__).resolve().parents[1]
#: the terminal width the sweeps are run at
COLUMNS = 100
#: the xdist group of the modules that read the quickstart's run (``make test`` runs ``--dist loadgroup``)
QUICKSTART_GROUP = pytest.mark.xdist_group("quickstart")


@dataclass
class Swept:
    code: int
    stdout: str
    stderr: str

    @property
    def run_dir(self) -> Path:
        """The run directory: the last line a sweep prints."""
        return Path(self.stdout.splitlines()[-1])


def sweep(*argv: str, monkeypatch: pytest.MonkeyPatch) -> Swept:
    """``pmem sweep ARGV`` in this process (on the session's cluster) at ``COLUMNS``, its stdout and
    stderr captured."""
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(list(argv))
    out, err = io.StringIO(), io.StringIO()
    monkeypatch.setenv("COLUMNS", str(COLUMNS))
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli_run(args)
    return Swept(code, out.getvalue(), err.getvalue())


def quickstart_config(folder: Path, progress_s: float = 0.2) -> Path:
    """The quickstart config with a progress line every ``progress_s`` (several lines in a short sweep),
    written into ``folder``."""
    text = (REPO / "jobs" / "quickstart.toml").read_text()
    assert "progress_s = 10" in text
    config = folder / "quickstart.toml"
    config.write_text(text.replace("progress_s = 10", f"progress_s = {progress_s}"))
    return config
