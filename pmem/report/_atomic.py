"""Every file the report writes goes through here: all of a report's files appear together, or none do.

A report is several files (tables, figures, report.md, report.html) that only make sense together, so
:class:`ReportWriter` writes each one aside (:func:`pmem._atomic.write_aside`: a temporary file in its own
directory, flushed and fsynced) and renames nothing until every file is written. A failure while
writing (a full disk, a quota, an I/O error) deletes the temporary files and leaves the previous report
exactly as it was; a reader never sees a truncated file.

>>> import pathlib, tempfile
>>> out = pathlib.Path(tempfile.mkdtemp())
>>> with ReportWriter(out) as w:
...     _ = w.write("report.md", b"# hello")
>>> (out / "report.md").read_bytes()
b'# hello'
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from types import TracebackType

from pmem._atomic import checkpoint, fsync_dir, write_aside


class ReportWriter:
    """Files written aside under ``root`` and published together by :meth:`commit`.

    Used as a context manager: commits when the block ends normally, discards every temporary file when
    it raises. ``prune`` names subdirectories whose files not written in this transaction are removed at
    commit (figures a previous report had and this one does not).
    """

    def __init__(self, root: Path, *, prune: tuple[str, ...] = ()) -> None:
        self.root = Path(root)
        self.prune = prune
        self._pending: dict[Path, Path] = {}  # final path -> temporary file
        self._paths: set[Path] = set()

    def write(self, rel: str | Path, data: bytes) -> Path:
        """Stage ``data`` for ``root/rel``; return the final path (which holds it once committed)."""
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        old = self._pending.pop(path, None)
        if old is not None:
            old.unlink(missing_ok=True)
        self._pending[path] = write_aside(path, data)
        self._paths.add(path)
        return path

    def write_text(self, rel: str | Path, text: str) -> Path:
        return self.write(rel, text.encode("utf-8"))

    def commit(self) -> None:
        """Rename every staged file into place (renames need no space), then drop stale pruned files."""
        dirs = {p.parent for p in self._pending}
        checkpoint("report:written")
        try:
            # report.md and report.html last: they refer to the tables and figures
            for path in sorted(self._pending, key=lambda p: p.parent == self.root):
                os.replace(self._pending.pop(path), path)
                checkpoint(f"report:renamed:{path.relative_to(self.root).as_posix()}")
        finally:
            self.abort()
        for sub in self.prune:
            d = self.root / sub
            for p in d.iterdir() if d.is_dir() else ():
                if p.is_file() and p not in self._paths:
                    p.unlink(missing_ok=True)
        for d in dirs:
            fsync_dir(d)

    def abort(self) -> None:
        """Delete every temporary file not yet renamed."""
        for tmp in self._pending.values():
            with contextlib.suppress(OSError):
                tmp.unlink()
        self._pending.clear()

    def __enter__(self) -> ReportWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.abort()
