"""docs/design.md matches the code: every module and folder it names exists (in pmem/, tests/ and
benchmarks/), and its Models section names every built-in backend."""

from __future__ import annotations

import re
from pathlib import Path

from pmem.models import _registry

ROOT = Path(__file__).resolve().parents[1]
DESIGN = ROOT / "docs" / "design.md"
#: a code span naming a path: pmem/..., a bare module (``_x.py``, ``shards.py``) or a bare folder (``_store/``)
_SPAN = re.compile(r"`([^`\s]+)`")


def _segments(text: str) -> list[str]:
    """Where a bare module name is read against the last folder named before it: a table row, or a
    paragraph (blank-line separated), of the page."""
    out: list[str] = []
    for block in text.split("\n\n"):
        if block.lstrip().startswith("|"):
            out.extend(block.splitlines())  # a row: a cell's bare names read against the row's folders
        else:
            out.append(block)
    return out


def named_paths(text: str) -> list[tuple[str, Path]]:
    """(as written, the path it names) for every module or folder path the page names."""
    found = []
    for segment in _segments(text):
        folder: Path | None = None
        for span in _SPAN.findall(segment):
            rooted = span.startswith(("pmem/", "tests/", "benchmarks/"))
            if rooted and not any(part.isupper() for part in span.split("/")):
                # (``pmem/X/__init__.py``: a placeholder, not a path)
                path = ROOT / span.rstrip("/")
                if span.startswith("pmem/"):  # the folders whose bare module names the page uses
                    folder = path if span.endswith("/") else path.parent
                found.append((span, path))
            elif folder is not None and re.fullmatch(r"\w+\.py|\w+/", span):
                found.append((span, folder / span.rstrip("/")))
            elif re.fullmatch(r"\w+\.py", span):
                # a bare module before any folder is named reads against none: reported missing (a bare
                # folder there names a run directory's, ``results/``, not the repository's)
                found.append((span, ROOT / "no folder named before it" / span))
    return found


def test_every_module_and_folder_the_design_page_names_exists() -> None:
    paths = named_paths(DESIGN.read_text())
    assert len(paths) > 60  # the page names its modules: a parse that finds few has gone wrong
    missing = [span for span, path in paths if not path.exists()]
    assert missing == [], f"docs/design.md names modules that are not there: {missing}"


def test_a_module_that_disappears_is_caught() -> None:
    page = "| x | `pmem/graph/_persist/_state.py`, `_sealing.py`, `_gone.py` | y |\n\n`pmem/models/` holds `_spec.py`."
    paths = dict(named_paths(page))
    assert [s for s, p in paths.items() if not p.exists()] == ["_gone.py"]
    assert paths["_spec.py"] == ROOT / "pmem" / "models" / "_spec.py"


def test_the_models_section_names_every_built_in_backend() -> None:
    models = DESIGN.read_text().split("## Models", 1)[1].split("\n## ", 1)[0]
    built_in = set(_registry._CHAT_BUILTIN) | set(_registry._EMBED_BUILTIN)  # (other tests add plugins)
    assert len(built_in) >= 6
    assert built_in - set(_SPAN.findall(models)) == set()
