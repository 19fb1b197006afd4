"""Vendored data: where ``datasets/`` is, and verification against ``datasets/MANIFEST.json``.

Every file a benchmark reads is listed in the manifest with its sha256, source and licence; a
missing or altered file raises :class:`DataError` naming the file and how to obtain it.
"""

from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Any

from pmem._atomic import file_sha256
from pmem._bundle import bundled

ENV_VAR = "PMEM_DATASETS"


class DataError(RuntimeError):
    """A data file is missing, altered, or does not have the expected shape."""


def datasets_root() -> Path:
    """``$PMEM_DATASETS`` if set, else the repository's ``datasets/`` (found next to the package), else
    the copy an installed wheel carries (:mod:`pmem._bundle`)."""

    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env)
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "datasets" / "MANIFEST.json").is_file():
            return parent / "datasets"
    return bundled("datasets") or Path.cwd() / "datasets"


def load_manifest(root: Path | None = None) -> dict[str, Any]:
    root = root or datasets_root()
    path = root / "MANIFEST.json"
    if not path.is_file():
        msg = (
            f"{path} is missing: the vendored data manifest ships with the repository "
            f"(clone it, or point ${ENV_VAR} at a copy of its datasets/ folder)"
        )
        raise DataError(msg)
    try:
        manifest: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        msg = f"{path} is not valid JSON: {exc}"
        raise DataError(msg) from exc
    return manifest


def record_file(relpath: str, *, source: str, licence: str, obtain: str, root: Path | None = None) -> None:
    """List ``relpath`` (under the datasets root) in MANIFEST.json with its sha256 and size, for a file
    this project derives (``pmem bench judge-set --write``); other entries are kept as they are."""
    root = root or datasets_root()
    manifest = load_manifest(root)
    path = root / relpath
    files = manifest.setdefault("files", {})
    files[relpath] = {
        "sha256": file_sha256(path),
        "bytes": path.stat().st_size,
        "source": source,
        "licence": licence,
        "obtain": obtain,
    }
    manifest["files"] = dict(sorted(files.items()))
    manifest["total_bytes"] = sum(int(e["bytes"]) for e in manifest["files"].values())
    tmp = root / "MANIFEST.json.tmp"
    tmp.write_text(json.dumps(manifest, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, root / "MANIFEST.json")


@lru_cache(maxsize=64)
def _verified(path: str, size: int, mtime_ns: int, sha: str) -> bool:
    # Keyed on size and mtime so a file edited in place is hashed again.
    return file_sha256(path) == sha


def verified_path(relpath: str, root: Path | None = None) -> Path:
    """The absolute path of a manifest-listed file after checking its sha256.

    >>> verified_path("alfworld/alfworld_vocab.json").name
    'alfworld_vocab.json'
    """
    root = root or datasets_root()
    manifest = load_manifest(root)
    entry = manifest.get("files", {}).get(relpath)
    if entry is None:
        msg = f"{relpath} is not listed in {root / 'MANIFEST.json'}"
        raise DataError(msg)
    path = root / relpath
    how = entry.get("obtain") or f"restore it from the repository (source: {entry.get('source', '?')})"
    if not path.is_file():
        msg = f"data file {path} is missing; {how}"
        raise DataError(msg)
    st = path.stat()
    if not _verified(str(path), st.st_size, st.st_mtime_ns, entry["sha256"]):
        msg = (
            f"data file {path} does not match its sha256 in MANIFEST.json "
            f"(expected {entry['sha256']}); it was altered or truncated: {how}"
        )
        raise DataError(msg)
    return path


def verify_all(root: Path | None = None) -> list[tuple[str, bool, str]]:
    """(file, ok, message) for every file in the manifest."""
    root = root or datasets_root()
    out: list[tuple[str, bool, str]] = []
    for rel in load_manifest(root).get("files", {}):
        try:
            verified_path(rel, root)
            out.append((rel, True, "ok"))
        except DataError as exc:
            out.append((rel, False, str(exc)))
    return out
