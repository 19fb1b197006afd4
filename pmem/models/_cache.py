"""Content-addressed response cache on disk: SQLite in WAL mode, safe under concurrent writers.

A chat entry is keyed by sha256 over (model id, messages, purpose, max_tokens, temperature, schema);
an embedding by (model id, text). Writers in several processes share one file: WAL lets readers run
during a write, ``busy_timeout`` serializes writers, ``INSERT OR IGNORE`` makes a lost race harmless
(both writers computed the same deterministic answer).

>>> import tempfile, os
>>> c = ResponseCache(os.path.join(tempfile.mkdtemp(), "cache.sqlite"))
>>> k = ResponseCache.chat_key("m", [{"role": "user", "content": "hi"}], purpose="answer")
>>> c.put(k, {"text": "hello"}); c.get(k)
{'text': 'hello'}
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

_SCHEMA = """
CREATE TABLE IF NOT EXISTS chat (key TEXT PRIMARY KEY, payload TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS vectors (key TEXT PRIMARY KEY, dim INTEGER NOT NULL, data BLOB NOT NULL);
"""


def _ensure_wal(conn: sqlite3.Connection) -> None:
    if conn.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
        conn.execute("PRAGMA journal_mode=WAL")


def _retry_locked(step: Callable[[], object], attempts: int = 40) -> None:
    delay = 0.01
    for attempt in range(attempts):
        try:
            step()
            return
        except sqlite3.OperationalError as exc:
            if ("locked" not in str(exc) and "busy" not in str(exc)) or attempt == attempts - 1:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 1.0)


class CacheWriteError(OSError):
    """The cache file could not be written (``"{path}: database or disk is full ..."``): an OSError, as
    any other file a command writes, so that commands report it in one line."""


class ResponseCache:
    """One SQLite file; one connection per (process, thread), opened lazily (fork-safe).

    ``write_behind``: chat entries are held in memory (and answer :meth:`get` at once) until
    :meth:`flush` writes them all in one transaction. One transaction per entry costs more than the
    heuristic agent's whole answer; a writer that knows when its calls must be durable (an ingest
    worker, before it reports them) flushes then, and a crash loses only calls nobody was told of.

    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "cache.sqlite")
    >>> held = ResponseCache(path, write_behind=True)
    >>> held.put("k", {"text": "hello"}); held.get("k"), ResponseCache(path).get("k")
    ({'text': 'hello'}, None)
    >>> held.flush(), ResponseCache(path).get("k")
    (1, {'text': 'hello'})
    """

    def __init__(self, path: str | os.PathLike[str], *, write_behind: bool = False) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        self.hits = 0
        self.misses = 0
        self.write_behind = write_behind
        self._held: dict[str, str] = {}  # key -> payload JSON, not written yet (write_behind)
        self._held_lock = threading.Lock()
        # every connection this object opened, with its process: close() closes this process's
        self._opened: list[tuple[int, sqlite3.Connection]] = []
        self._opened_lock = threading.Lock()
        self._conn()  # create the schema now so that a bad path fails here

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is not None and getattr(self._local, "pid", None) == os.getpid():
            return conn
        conn = sqlite3.connect(self.path, timeout=60.0, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA busy_timeout=60000")
        # WAL is a property of the file: set it once. Changing the journal mode, or recovering the WAL
        # of writers that were killed (a resumed sweep), can report "locked" without waiting on the
        # busy handler, so setup is retried with backoff instead of failing the caller.
        _retry_locked(lambda: _ensure_wal(conn))
        conn.execute("PRAGMA synchronous=NORMAL")
        _retry_locked(lambda: conn.executescript(_SCHEMA))
        self._local.conn, self._local.pid = conn, os.getpid()
        with self._opened_lock:
            self._opened.append((os.getpid(), conn))
        return conn

    @staticmethod
    def chat_key(
        model_id: str,
        messages: Sequence[dict[str, str]],
        *,
        purpose: str,
        max_tokens: int = 256,
        temperature: float = 0.0,
        schema: dict[str, Any] | None = None,
    ) -> str:
        blob = json.dumps(
            [model_id, [dict(m) for m in messages], purpose, max_tokens, temperature, schema],
            sort_keys=True,
            ensure_ascii=False,
            separators=(",", ":"),
        )
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()

    @staticmethod
    def vector_key(model_id: str, text: str) -> str:
        return hashlib.sha256(f"{model_id}\x00{text}".encode()).hexdigest()

    def get(self, key: str) -> dict[str, Any] | None:
        text = self._held.get(key)
        if text is None:
            row = self._conn().execute("SELECT payload FROM chat WHERE key = ?", (key,)).fetchone()
            if row is None:
                self.misses += 1
                return None
            text = row[0]
        self.hits += 1
        return json.loads(text)

    def put(self, key: str, payload: dict[str, Any]) -> None:
        text = json.dumps(payload, ensure_ascii=False)
        if self.write_behind:
            with self._held_lock:
                self._held.setdefault(key, text)  # the first answer stays, as INSERT OR IGNORE keeps it
            return
        try:
            self._conn().execute("INSERT OR IGNORE INTO chat (key, payload) VALUES (?, ?)", (key, text))
        except sqlite3.OperationalError as exc:
            raise CacheWriteError(f"{self.path}: {exc} (writing the response cache)") from exc

    def flush(self) -> int:
        """Write the held chat entries (``write_behind``) in one transaction; how many there were."""
        with self._held_lock:
            rows = list(self._held.items())
        if not rows:
            return 0
        # held (and answering get) until written: a failed write loses nothing
        self._write_many("INSERT OR IGNORE INTO chat (key, payload) VALUES (?, ?)", rows)
        with self._held_lock:
            for key, _ in rows:
                self._held.pop(key, None)
        return len(rows)

    def _write_many(self, sql: str, rows: Sequence[tuple[Any, ...]]) -> None:
        with self._transaction("writing the response cache") as conn:
            conn.executemany(sql, rows)

    @contextlib.contextmanager
    def _transaction(self, doing: str) -> Iterator[sqlite3.Connection]:
        """One write transaction; a failure of the file (a full disk, a read-only file) is a
        :class:`CacheWriteError` naming it and what was being done."""
        conn = self._conn()
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException:
                # SQLite may have rolled back already (a full disk does): a second ROLLBACK would raise
                # "no transaction is active" and hide the error that matters
                if conn.in_transaction:
                    with contextlib.suppress(sqlite3.Error):
                        conn.execute("ROLLBACK")
                raise
        except sqlite3.OperationalError as exc:
            raise CacheWriteError(f"{self.path}: {exc} ({doing})") from exc

    def get_vectors(self, model_id: str, texts: Sequence[str]) -> dict[int, np.ndarray]:
        keys = [self.vector_key(model_id, t) for t in texts]
        found: dict[str, np.ndarray] = {}
        conn = self._conn()
        for start in range(0, len(keys), 500):
            chunk = keys[start : start + 500]
            q = f"SELECT key, dim, data FROM vectors WHERE key IN ({','.join('?' * len(chunk))})"
            for key, dim, data in conn.execute(q, chunk):
                found[key] = np.frombuffer(data, dtype=np.float32, count=dim)
        return {i: found[k] for i, k in enumerate(keys) if k in found}

    def put_vectors(self, model_id: str, texts: Sequence[str], vectors: np.ndarray) -> None:
        rows = [
            (
                self.vector_key(model_id, t),
                int(v.shape[0]),
                np.ascontiguousarray(v, dtype=np.float32).tobytes(),
            )
            for t, v in zip(texts, vectors, strict=True)
        ]
        self._write_many("INSERT OR IGNORE INTO vectors (key, dim, data) VALUES (?, ?, ?)", rows)

    def erase_containing(self, needles: Sequence[str]) -> int:
        """Delete every chat entry whose reply holds one of ``needles`` (an erased text, a value only it
        stated), with its bytes overwritten (``secure_delete``), then rebuild the file and empty its
        write-ahead log, so that no copy is left in a free page or in ``-wal``. The number deleted.

        A prompt is stored only as its hash; a reply is the entry's text. Held entries go too.
        """
        wanted = [n for n in needles if n]
        with self._held_lock:
            for key in [k for k, text in self._held.items() if any(n in text for n in wanted)]:
                del self._held[key]
        doing = "erasing from the response cache"
        self._conn().execute("PRAGMA secure_delete=ON")
        deleted = 0
        with self._transaction(doing) as conn:
            for needle in wanted:
                deleted += conn.execute("DELETE FROM chat WHERE instr(payload, ?) > 0", (needle,)).rowcount
        try:
            conn.execute("VACUUM")
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except sqlite3.OperationalError as exc:
            raise CacheWriteError(f"{self.path}: {exc} ({doing})") from exc
        return deleted

    def __len__(self) -> int:
        """Chat entries written to the file (held ones count once flushed)."""
        return int(self._conn().execute("SELECT COUNT(*) FROM chat").fetchone()[0])

    def integrity_ok(self) -> bool:
        return self._conn().execute("PRAGMA integrity_check").fetchone()[0] == "ok"

    def close(self) -> None:
        """Flush what is held, then close every connection this process opened (any thread's): when the
        last connection to the file closes, SQLite folds the write-ahead log into it and removes
        ``-wal``, so a closed cache leaves one file (a connection left to the garbage collector
        would do it at some later moment). A later call opens a new connection."""
        self.flush()
        with self._opened_lock:
            mine = [conn for pid, conn in self._opened if pid == os.getpid()]
            self._opened = [(pid, conn) for pid, conn in self._opened if pid != os.getpid()]
        for conn in mine:
            conn.close()
        self._local.conn = None
