"""The commit record ``_commits/<batch>.json``: which histories a batch completed and which files it moved.

The runner writes one per batch as its point of no return (:mod:`pmem.runner._store`), recovery and erasure
read and rewrite them, and the report checks a run's files against them. The JSON object, in this key order
(``json.dumps`` with its default separators; every runner version wrote it so)::

    {"batch": "<id>", "staging": "_staging/<runner>/<batch>", "units": ["<unit id>", ...],
     "moves": [["<staged path>", "<dest>"], ...], "drop": ["<dest>", ...],
     "sha256": {"<dest>": "<hex digest>", ...}, "time": <unix time>}

``moves`` pairs a path under ``staging`` with its destination, relative to the run directory; ``drop``
names files the batch deletes (failed-history rows it supersedes); ``sha256`` holds each moved file's
digest. Records of runners before checksums have no ``sha256`` (nothing to verify) and may lack ``drop``.
A later batch may rewrite a file (its record then holds the current digest) or delete it (``drop``).

>>> import pathlib, tempfile
>>> run = pathlib.Path(tempfile.mkdtemp()); (run / "_commits").mkdir()
>>> rec = CommitRecord("b1", "_staging/r/b1", ("u1",), (("results/p.parquet", "results/p.parquet"),))
>>> CommitRecord.read(rec.write(run)) == rec
True
>>> [str(d) for d in rec.verify(run)]
['results/p.parquet: missing (committed, but no longer in the run directory)']
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pmem._atomic import atomic_write_bytes, file_sha256
from pmem.rundir._layout import COMMITS

_JSON = ".json"


class CommitRecordError(ValueError):
    """A commit record that cannot be read: unreadable, not JSON, or not a record. Names the file."""

    def __init__(self, source: str | Path, reason: str) -> None:
        super().__init__(f"{source}: {reason}")
        self.source = source
        self.reason = reason


@dataclass(frozen=True)
class Damaged:
    """A run file that is missing or differs from its recorded checksum (``path`` relative to RUN_DIR),
    or a commit record that cannot be read (its files then cannot be verified)."""

    path: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


@dataclass(frozen=True)
class CommitRecord:
    """One batch's commit record (see the module docstring for the JSON it reads and writes)."""

    batch: str
    #: the batch's staging folder, relative to the run directory
    staging: str
    #: the units (history x arm) the batch completed
    units: tuple[str, ...]
    #: (path under ``staging``, destination relative to the run directory) of each file
    moves: tuple[tuple[str, str], ...]
    #: files (relative to the run directory) the batch deletes
    drop: tuple[str, ...] = ()
    #: destination -> sha256 hex digest; ``None`` in records of runners before checksums
    sha256: Mapping[str, str] | None = None
    #: when the record was written (seconds since the epoch); orders records naming the same file
    time: float | None = None

    # -- where --------------------------------------------------------------------------------------------
    def path(self, run_dir: Path) -> Path:
        """The record's file in ``run_dir``: ``_commits/<batch>.json``."""
        return Path(run_dir) / COMMITS / f"{self.batch}{_JSON}"

    @staticmethod
    def paths(run_dir: Path) -> list[Path]:
        """Every record file of ``run_dir``, by name (temporary files of an interrupted write excluded)."""
        cdir = Path(run_dir) / COMMITS
        return sorted(cdir.glob(f"*{_JSON}")) if cdir.is_dir() else []

    # -- JSON -----------------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "batch": self.batch,
            "staging": self.staging,
            "units": list(self.units),
            "moves": [list(m) for m in self.moves],
            "drop": list(self.drop),
        }
        if self.sha256 is not None:
            doc["sha256"] = dict(self.sha256)
        if self.time is not None:
            doc["time"] = self.time
        return doc

    @classmethod
    def from_json(cls, doc: Any, source: str | Path = "commit record") -> CommitRecord:
        """The record in ``doc`` (a decoded JSON value); :class:`CommitRecordError` naming ``source`` when
        it is not one. Keys it does not know are ignored."""

        def bad(what: str) -> CommitRecordError:
            return CommitRecordError(source, f"malformed commit record ({what})")

        if not isinstance(doc, dict):
            raise bad(f"a JSON {type(doc).__name__}, not an object")
        for key in ("batch", "staging", "units", "moves"):
            if key not in doc:
                raise bad(f'no "{key}"')
        for key in ("batch", "staging"):
            if not isinstance(doc[key], str):
                raise bad(f'"{key}" is not a string')
        for key in ("units", "drop"):
            value = doc.get(key, [])
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise bad(f'"{key}" is not a list of strings')
        moves = doc.get("moves")
        if not isinstance(moves, list) or not all(
            isinstance(m, list) and len(m) == 2 and all(isinstance(p, str) for p in m) for m in moves
        ):
            raise bad('"moves" is not a list of [staged, destination] path pairs')
        sums = doc.get("sha256")
        if sums is not None and not (
            isinstance(sums, dict) and all(isinstance(v, str) for v in sums.values())
        ):
            raise bad('"sha256" is not an object of path -> hex digest')
        t = doc.get("time")
        if t is not None and (isinstance(t, bool) or not isinstance(t, int | float)):
            raise bad('"time" is not a number')
        return cls(
            batch=doc["batch"],
            staging=doc["staging"],
            units=tuple(doc["units"]),
            moves=tuple((src, dest) for src, dest in moves),
            drop=tuple(doc.get("drop", [])),
            sha256=sums,
            time=t,
        )

    # -- files ----------------------------------------------------------------------------------------
    def write(self, run_dir: Path) -> Path:
        """Write the record to ``_commits/<batch>.json`` atomically: aside, fsynced, renamed, the folder
        fsynced (:func:`pmem._atomic.atomic_write_bytes`). Returns its path."""
        path = self.path(run_dir)
        atomic_write_bytes(path, json.dumps(self.to_json()).encode())
        return path

    @classmethod
    def read(cls, path: Path) -> CommitRecord:
        """The record in ``path``; :class:`CommitRecordError` naming the file when it cannot be read."""
        try:
            doc = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise CommitRecordError(path, f"unreadable commit record ({exc})") from exc
        return cls.from_json(doc, path)

    @classmethod
    def read_all(cls, run_dir: Path) -> list[CommitRecord]:
        """Every record of ``run_dir``, by file name; the first that cannot be read raises."""
        return [cls.read(p) for p in cls.paths(run_dir)]

    def verify(self, run_dir: Path, *, checksums: bool = True) -> list[Damaged]:
        """The files this record moved that are missing from ``run_dir`` or (``checksums``) no longer have
        the recorded sha256, in the record's order. A file without a recorded digest is only checked to
        exist."""
        out = []
        run_dir = Path(run_dir)
        base = run_dir.resolve()
        sums = self.sha256 or {}
        for _, dest in self.moves:
            problem = _check_file(run_dir, base, dest, sums.get(dest) if checksums else None)
            if problem is not None:
                out.append(problem)
        return out


def _check_file(run_dir: Path, base: Path, rel: str, digest: str | None) -> Damaged | None:
    """What is wrong with committed file ``rel`` of ``run_dir`` (resolved: ``base``): outside the run,
    missing, unreadable, or (with ``digest``) other bytes than recorded; ``None`` when nothing is."""
    path = (run_dir / rel).resolve()
    if not path.is_relative_to(base):
        return Damaged(rel, "recorded path lies outside the run directory")
    if not path.is_file():
        return Damaged(rel, "missing (committed, but no longer in the run directory)")
    if digest is None:
        return None
    try:
        found = file_sha256(path)
    except OSError as exc:
        return Damaged(rel, f"unreadable ({exc.strerror or exc})")
    if found != digest.lower():
        return Damaged(rel, f"checksum mismatch (recorded sha256 {digest[:12]}…, file has {found[:12]}…)")
    return None


def record_digests(run_dir: Path, sums: Mapping[str, str]) -> None:
    """Write the new sha256 of committed files rewritten in place (``sums``: path relative to the run
    directory -> digest) into every commit record that names them, so that the run still verifies."""
    if not sums:
        return
    for record in CommitRecord.read_all(run_dir):
        recorded = record.sha256 or {}
        hits = {rel: sha for rel, sha in sums.items() if rel in recorded}
        if hits:
            replace(record, sha256={**recorded, **hits}).write(run_dir)


def verify_commits(run_dir: Path) -> list[Damaged]:
    """Every committed file of ``run_dir`` that is gone or whose bytes differ from its recorded sha256,
    and every commit record that cannot be read; sorted by path.

    The newest record naming a file holds its current digest; a later record's ``drop`` means the file is
    gone on purpose. Records without checksums verify nothing.
    """
    run_dir = Path(run_dir)
    records: list[CommitRecord] = []
    damaged: list[Damaged] = []
    for p in CommitRecord.paths(run_dir):
        try:
            records.append(CommitRecord.read(p))
        except CommitRecordError as exc:
            rel = p.relative_to(run_dir).as_posix()
            damaged.append(Damaged(rel, f"{exc.reason}: its files cannot be verified"))
    expected: dict[str, str] = {}
    for rec in sorted(records, key=lambda r: (float(r.time or 0.0), r.batch)):
        for rel in rec.drop:
            expected.pop(rel, None)
        expected.update(rec.sha256 or {})
    base = run_dir.resolve()
    for rel, digest in sorted(expected.items()):
        problem = _check_file(run_dir, base, rel, digest)
        if problem is not None:
            damaged.append(problem)
    return sorted(damaged, key=lambda d: d.path)
