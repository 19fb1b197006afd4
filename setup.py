"""Build hook: the wheel carries the quickstart config and the vendored datasets (``pmem/_bundle.py``
says which), so that ``pmem demo`` runs from ``pip install 'pmem[eval]'``; everything else is in
``pyproject.toml``."""

from __future__ import annotations

import runpy
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
#: read without importing the package (its dependencies are not in the build environment)
BUNDLE = runpy.run_path(str(HERE / "pmem" / "_bundle.py"))


class BuildWithBundle(build_py):
    """``build_py``, then the bundled copies into ``pmem/<FOLDER>/`` of the build."""

    def run(self) -> None:
        super().run()
        target = Path(self.build_lib) / "pmem" / BUNDLE["FOLDER"]
        for relative in BUNDLE["PATHS"]:
            source, dest = HERE / relative, target / relative
            if not source.exists():  # an sdist without them: the demo then says how to get them
                continue
            dest.parent.mkdir(parents=True, exist_ok=True)
            if source.is_dir():
                shutil.copytree(source, dest, dirs_exist_ok=True)
            else:
                shutil.copy2(source, dest)


if __name__ == "__main__":  # as setuptools' build backend runs it (a test imports the hook alone)
    setup(cmdclass={"build_py": BuildWithBundle})
