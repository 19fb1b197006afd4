"""The ``mem0`` arm runs Mem0 itself through the harness: its calls are the history's request rows, a
library failure is one failed history with its message, and the heuristic agent does not run it.

Needs the ``mem0`` extra (skipped without it; ``make test-peers``)."""

from __future__ import annotations

import importlib.util
import io
import tarfile

import pytest
from peers_helpers import histories, run

from pmem.arms import NEEDS_A_MODEL
from pmem.models import make_chat_model

pytestmark = [
    pytest.mark.peers,  # make test-peers: installing the extra does not change make test
    pytest.mark.skipif(importlib.util.find_spec("mem0") is None, reason="needs the mem0 extra"),
]


def test_with_the_heuristic_agent_the_arm_is_not_run_and_says_why() -> None:
    ((out, recorder),) = run("mem0", make_chat_model("heuristic"), histories(1))
    assert out.history_row.status == "failed"
    assert f"not run: Mem0 {NEEDS_A_MODEL}" in (out.history_row.error or "")
    assert recorder.calls == 0  # refused before any call


def test_the_library_runs_through_the_proxy_and_every_call_is_a_request_row() -> None:
    from pmem.models.server import ServerThread

    with ServerThread() as server:
        agent = make_chat_model(
            {"backend": "openai", "url": server.url, "model": "heuristic", "max_retries": 0}
        )
        ((out, recorder),) = run("mem0", agent, histories(1))
        served = server.stats["requests"]
    assert out.history_row.status == "complete", out.history_row.error
    chat = [r for r in recorder.rows if r.purpose != "embed"]
    assert len(chat) == served > 0  # every request the server received is one row
    assert {r.purpose for r in chat} <= {"peer_write", "peer_read", "answer"}
    assert any(r.purpose == "peer_write" for r in chat) and any(r.purpose == "answer" for r in chat)
    # the library's write calls are the history's write cost, as our write paths' calls are
    writes = [r for r in chat if r.purpose == "peer_write"]
    row = out.history_row
    assert row.write_model_calls == len(writes)
    assert row.write_prompt_tokens == sum(r.prompt_tokens for r in writes) > 0
    assert row.write_completion_tokens == sum(r.completion_tokens for r in writes)
    assert out.results and all(r.read_tokens is not None for r in out.results)
    # what Mem0 held is the history's state: its files as one tar archive
    with tarfile.open(fileobj=io.BytesIO(out.store)) as tar:
        names = tar.getnames()
    assert "history.db" in names and any(n.startswith("faiss/") for n in names)


def test_a_library_failure_is_one_failed_history_and_the_next_goes_on() -> None:
    from pmem.models.server import ServerThread

    with ServerThread() as server:
        agent = make_chat_model(
            {"backend": "openai", "url": server.url, "model": "heuristic", "max_retries": 0}
        )
        server.faults.script.append("500")  # the first history's first call fails for good (no retries)
        (failed, failed_calls), (ok, _) = run("mem0", agent, histories(2))
    assert failed.history_row.status == "failed"
    # Mem0 asked once: the proxy's error answer says not to retry, since the model layer behind it owns
    # the retries (none here). With its openai client's own 2 retries, the second attempt got a reply.
    assert [r.purpose for r in failed_calls.rows if r.purpose != "embed"] == ["peer_write"]
    reason = (failed.history_row.error or "").splitlines()[-1]
    # the library's own message, then what the model layer said behind it (kept by the proxy)
    assert reason.startswith("pmem.peers._base.PeerFailed: mem0 add: ")
    assert "(model call: peer_write call to" in reason and "internal error (injected)" in reason
    assert ok.history_row.status == "complete", ok.history_row.error


def test_mem0s_clients_wait_for_the_proxy() -> None:
    """A one-thread llama.cpp replica can take longer than the openai SDK's 600 s on a long reply: Mem0's
    clients wait :data:`~pmem.peers.LIBRARY_WAIT_S`."""
    import asyncio

    from pmem.arms import ModelSet, make_arm
    from pmem.models import make_embedder
    from pmem.models.server import ServerThread
    from pmem.peers._base import LIBRARY_WAIT_S

    async def go(url: str) -> list[float]:
        agent = make_chat_model({"backend": "openai", "url": url, "model": "m", "max_retries": 0})
        arm = make_arm("mem0", ModelSet(agent, make_embedder("hashing")))
        try:
            memory = await arm.client()
            clients = (memory.llm.client, memory.embedding_model.client)
            return [c.timeout for c in clients]
        finally:
            await arm.aclose()

    with ServerThread() as server:
        assert asyncio.run(go(server.url)) == [LIBRARY_WAIT_S] * 2
