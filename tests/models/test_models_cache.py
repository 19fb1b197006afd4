"""Response cache: a second identical run makes zero backend calls; concurrent writers never corrupt it."""

from __future__ import annotations

import asyncio
import multiprocessing as mp

import numpy as np

from pmem.models import CallContext, RequestLog, ResponseCache, make_chat_model, make_embedder
from pmem.models.sections import format_sections
from pmem.models.server import ServerThread


def _prompts(n: int) -> list[list[dict[str, str]]]:
    return [
        [
            {
                "role": "user",
                "content": format_sections({"TEXT": f"Update: obj {i} has been moved from a 1 to b {i}."}),
            }
        ]
        for i in range(n)
    ]


def test_second_run_makes_zero_backend_calls(tmp_path) -> None:
    with ServerThread() as srv:

        async def sweep(cache: ResponseCache, log: RequestLog) -> list[str]:
            m = make_chat_model(
                {"backend": "openai", "url": srv.url, "model": "heuristic"}, cache=cache, log=log
            )
            e = make_embedder({"backend": "openai", "url": srv.url, "model": "hashing"}, cache=cache, log=log)
            out = await asyncio.gather(
                *(m.complete(p, purpose="extract", context=CallContext("h", "pmem")) for p in _prompts(30))
            )
            await e.embed(["a 1", "b 2", "c 3"], context=CallContext("h", "pmem"))
            await m.aclose()
            await e.inner.aclose()
            return [c.text for c in out]

        path = tmp_path / "cache.sqlite"
        log1 = RequestLog()
        first = asyncio.run(sweep(ResponseCache(path), log1))
        calls_after_first = srv.stats["requests"]
        assert calls_after_first == 31 and not any(r.cached for r in log1.records())
        log2 = RequestLog()
        second = asyncio.run(sweep(ResponseCache(path), log2))  # a fresh process would open the same file
        assert second == first
        assert srv.stats["requests"] == calls_after_first  # zero backend calls
        rows = log2.drain("h")
        assert len(rows) == 31 and all(r.cached for r in rows)
        assert rows[0].prompt_tokens > 0  # usage survives the cache


def _writer(path: str, worker: int, n: int) -> None:
    cache = ResponseCache(path)
    for i in range(n):
        key = ResponseCache.chat_key("m", [{"role": "user", "content": f"shared {i % 50}"}], purpose="answer")
        cache.put(key, {"text": f"answer {i % 50}", "model": "m", "prompt_tokens": 1, "completion_tokens": 1})
        own = ResponseCache.chat_key("m", [{"role": "user", "content": f"w{worker}-{i}"}], purpose="answer")
        cache.put(own, {"text": f"{worker}-{i}", "model": "m", "prompt_tokens": 1, "completion_tokens": 1})
        assert cache.get(own)["text"] == f"{worker}-{i}"
    cache.put_vectors(
        "emb", [f"t{worker}-{i}" for i in range(20)], np.full((20, 8), worker, dtype=np.float32)
    )


def test_concurrent_writers_never_corrupt(tmp_path) -> None:
    path = str(tmp_path / "shared.sqlite")
    ResponseCache(path)
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(path, w, 150)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    cache = ResponseCache(path)
    assert cache.integrity_ok()
    assert len(cache) == 50 + 4 * 150
    for w in range(4):
        got = cache.get_vectors("emb", [f"t{w}-{i}" for i in range(20)])
        assert len(got) == 20 and all(float(v[0]) == w for v in got.values())


def test_heuristic_cached_rows_marked(tmp_path) -> None:
    cache, log = ResponseCache(tmp_path / "c.sqlite"), RequestLog()
    m = make_chat_model("heuristic", cache=cache, log=log)
    p = _prompts(1)[0]
    a = asyncio.run(m.complete(p, purpose="extract", schema={"type": "object"}))
    b = asyncio.run(m.complete(p, purpose="extract", schema={"type": "object"}))
    assert a.text == b.text and b.parsed == a.parsed and b.cached and not a.cached
    assert [r.cached for r in log.records()] == [False, True] and m.backend_calls == 1
    assert all(r.tokens_estimated for r in log.records())


def test_write_behind_holds_entries_until_a_flush_writes_them_in_one_transaction(tmp_path) -> None:
    path = tmp_path / "c.sqlite"
    held = ResponseCache(path, write_behind=True)
    reader = ResponseCache(path)
    held.put("k1", {"text": "first"})
    held.put("k1", {"text": "second"})  # the first answer stays, as a write to the file keeps it
    held.put("k2", {"text": "other"})
    assert held.get("k1") == {"text": "first"} and held.hits == 1  # answered while held
    assert reader.get("k1") is None and len(reader) == 0  # nothing written yet
    commits: list[str] = []
    held._conn().set_trace_callback(lambda sql: commits.append(sql) if sql == "COMMIT" else None)
    assert held.flush() == 2 and commits == ["COMMIT"]
    assert reader.get("k1") == {"text": "first"} and reader.get("k2") == {"text": "other"}
    assert held.flush() == 0 and held.get("k2") == {"text": "other"}  # from the file now
    held.put("k3", {"text": "at close"})
    held.close()
    assert reader.get("k3") == {"text": "at close"}  # close flushes
    plain = ResponseCache(tmp_path / "p.sqlite")
    plain.put("k", {"text": "x"})
    assert ResponseCache(tmp_path / "p.sqlite").get("k") == {"text": "x"}  # written at once by default


def test_close_closes_every_threads_connection_and_leaves_one_file(tmp_path) -> None:
    """An ingest's cache is used from several threads; a connection left open would fold the write-ahead
    log in whenever the garbage collector closes it, after the ingest has returned."""
    import threading

    path = tmp_path / "c.sqlite"
    cache = ResponseCache(path)
    cache.put("main", {"text": "from the main thread"})
    worker = threading.Thread(target=lambda: cache.put("thread", {"text": "from another thread"}))
    worker.start()
    worker.join()
    assert path.with_name("c.sqlite-wal").exists()  # both connections open: the log is there
    cache.close()
    assert not path.with_name("c.sqlite-wal").exists()  # the last connection closed folded it in
    assert ResponseCache(path).get("thread") == {"text": "from another thread"}
    assert cache.get("main") == {"text": "from the main thread"}  # a later call opens a new connection
