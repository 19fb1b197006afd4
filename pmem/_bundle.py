"""What a wheel carries besides the code, so that ``pmem demo`` runs from a pip install: the quickstart
config and the vendored datasets. The repository keeps the one copy of each (``jobs/``, ``datasets/``);
``setup.py`` copies them into the package's :data:`FOLDER` when it builds a wheel.

>>> PATHS
('jobs/quickstart.toml', 'datasets')
"""

from __future__ import annotations

from pathlib import Path

#: the folder inside the installed package that holds the copies
FOLDER = "_bundled"
#: repository paths copied into it, at the same relative paths
PATHS = ("jobs/quickstart.toml", "datasets")


def bundled(relative: str) -> Path | None:
    """The installed copy of repository path ``relative`` (None in a source checkout, or when absent)."""
    path = Path(__file__).resolve().parent / FOLDER / relative
    return path if path.exists() else None
