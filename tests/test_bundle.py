"""An installed wheel carries the quickstart config and the datasets (``pmem/_bundle.py``): the demo and
the benchmarks find them when no repository is around (issue 30: ``pmem demo`` from a pip install)."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

import pmem._bundle as bundle
import pmem._demo as demo
import pmem.bench._data as data

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The package as site-packages holds it, with the bundled copies, and no repository near it."""
    package = tmp_path / "site" / "pmem"
    for relative in bundle.PATHS:
        target = package / bundle.FOLDER / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        if relative == "datasets":
            target.mkdir()
            (target / "MANIFEST.json").write_text("{}")
        else:
            target.write_text('name = "quickstart"\n')
    monkeypatch.setattr(bundle, "__file__", str(package / "_bundle.py"))
    monkeypatch.setattr(data, "__file__", str(package / "bench" / "_data.py"))
    monkeypatch.setattr(demo, "__file__", str(package / "_demo.py"))
    monkeypatch.delenv(data.ENV_VAR, raising=False)
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    return package / bundle.FOLDER


def test_an_installed_package_finds_its_bundled_config_and_datasets(installed: Path) -> None:
    assert demo._quickstart() == installed / "jobs" / "quickstart.toml"
    assert data.datasets_root() == installed / "datasets"


def test_without_a_bundle_or_a_repository_the_demo_says_where_to_run(
    installed: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bundle, "FOLDER", "absent")
    with pytest.raises(SystemExit, match=r"jobs/quickstart\.toml not found"):
        demo._quickstart()


def test_the_build_hook_copies_what_the_bundle_names(tmp_path: Path) -> None:
    """setup.py's ``build_py`` step, run on this checkout into a scratch build folder."""
    from setuptools.dist import Distribution

    hook = runpy.run_path(str(REPO / "setup.py"), run_name="pmem_setup")["BuildWithBundle"]
    command = hook(Distribution({"packages": []}))
    command.initialize_options()
    command.build_lib = str(tmp_path)
    command.finalize_options()
    command.run()
    shipped = tmp_path / "pmem" / bundle.FOLDER
    assert (shipped / "jobs" / "quickstart.toml").read_bytes() == (REPO / "jobs/quickstart.toml").read_bytes()
    assert (shipped / "datasets" / "MANIFEST.json").read_bytes() == (
        REPO / "datasets/MANIFEST.json"
    ).read_bytes()
    assert sorted(p.name for p in (shipped / "datasets").iterdir()) == sorted(
        p.name for p in (REPO / "datasets").iterdir()
    )
