"""Which P-Mem source a process runs: the git commit of its checkout, for a run's ``run.toml`` and a
report's header (an installed wheel has none)."""

from __future__ import annotations

import subprocess
from pathlib import Path

#: the checkout this package lives in, when it is one (``pmem/`` sits at its top)
_CHECKOUT = Path(__file__).resolve().parent.parent


def source_commit() -> str | None:
    """The commit of the checkout this package is imported from, with ``+dirty`` when its tracked files
    differ from it; None when it is not a git checkout (an installed wheel) or git cannot say.

    >>> commit = source_commit()
    >>> commit is None or len(commit.removesuffix("+dirty")) == 40
    True
    """
    if not (_CHECKOUT / ".git").exists() or not (_CHECKOUT / "pmem").is_dir():
        return None
    git = ["git", "-C", str(_CHECKOUT)]
    try:
        head = subprocess.run(
            [*git, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=30, check=True
        )
        status = subprocess.run(
            [*git, "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("+dirty" if status.stdout.strip() else "")
