"""Checking a run's committed files against the checksums the runner recorded.

Each ``RUN_DIR/_commits/<batch>.json`` names the files its batch moved into the run directory
(``moves``: ``[staged, dest]`` pairs, ``dest`` relative to RUN_DIR) and, from the runner version that
records them, ``sha256``: ``{dest: hex digest of the file's bytes}``. Older records have no ``sha256``:
there is nothing to verify for them. A later batch may rewrite a file (its record then holds the
current digest) or delete one (``drop``).

A damaged file is reported by path and left out of the datasets the report reads; the report is built
from what is intact.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

COMMITS = "_commits"


@dataclass(frozen=True)
class Damaged:
    """A run file that is missing or differs from its recorded checksum (``path`` relative to RUN_DIR)."""

    path: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


def sha256_file(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _records(root: Path) -> tuple[list[dict[str, Any]], list[Damaged]]:
    cdir = root / COMMITS
    records: list[dict[str, Any]] = []
    damaged: list[Damaged] = []
    if not cdir.is_dir():
        return records, damaged
    for p in sorted(cdir.glob("*.json")):
        rel = p.relative_to(root).as_posix()
        try:
            rec = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            damaged.append(Damaged(rel, f"unreadable commit record ({exc}): its files cannot be verified"))
            continue
        sums = rec.get("sha256") if isinstance(rec, dict) else None
        if not isinstance(rec, dict) or (sums is not None and not isinstance(sums, dict)):
            damaged.append(Damaged(rel, "malformed commit record: its files cannot be verified"))
            continue
        records.append(rec)
    return records, damaged


def verify_commits(root: Path) -> list[Damaged]:
    """Every committed file whose bytes differ from its recorded sha256, or that is gone; sorted by path."""
    records, damaged = _records(root)

    def order(rec: dict[str, Any]) -> tuple[float, str]:
        t = rec.get("time")
        return (float(t) if isinstance(t, int | float) else 0.0, str(rec.get("batch", "")))

    # the newest record that names a file holds its current digest; a later drop means it is gone on purpose
    expected: dict[str, str] = {}
    for rec in sorted(records, key=order):
        for rel in rec.get("drop") or []:
            expected.pop(str(rel), None)
        for rel, digest in (rec.get("sha256") or {}).items():
            expected[str(rel)] = str(digest).lower()
    base = root.resolve()
    for rel, digest in sorted(expected.items()):
        path = (root / rel).resolve()
        if not path.is_relative_to(base):
            damaged.append(Damaged(rel, "recorded path lies outside the run directory"))
        elif not path.is_file():
            damaged.append(Damaged(rel, "missing (committed, but no longer in the run directory)"))
        else:
            try:
                found = sha256_file(path)
            except OSError as exc:
                damaged.append(Damaged(rel, f"unreadable ({exc.strerror or exc})"))
                continue
            if found != digest:
                damaged.append(
                    Damaged(
                        rel, f"checksum mismatch (recorded sha256 {digest[:12]}…, file has {found[:12]}…)"
                    )
                )
    return sorted(damaged, key=lambda d: d.path)
