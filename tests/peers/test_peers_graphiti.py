"""The ``graphiti`` arm runs Graphiti itself (over embedded Kuzu) through the harness: its calls are the
history's request rows, a schema error from a model that does not speak its prompts is one failed
history with the library's message, and the heuristic agent does not run it.

Needs the ``graphiti`` extra (skipped without it; ``make test-peers``)."""

from __future__ import annotations

import importlib.util
import re

import pytest
from peers_helpers import histories, run

from pmem.arms import NEEDS_A_MODEL
from pmem.models import make_chat_model

pytestmark = [
    pytest.mark.peers,  # make test-peers: installing the extra does not change make test
    pytest.mark.skipif(
        importlib.util.find_spec("graphiti_core") is None or importlib.util.find_spec("kuzu") is None,
        reason="needs the graphiti extra",
    ),
]


def test_with_the_heuristic_agent_the_arm_is_not_run_and_says_why() -> None:
    ((out, recorder),) = run("graphiti", make_chat_model("heuristic"), histories(1))
    assert out.history_row.status == "failed"
    assert f"not run: Graphiti {NEEDS_A_MODEL}" in (out.history_row.error or "") and recorder.calls == 0


@pytest.mark.slow  # Graphiti retries an empty reply with backoff: about 80 s (make test-peers runs it)
def test_a_reply_off_its_schema_fails_the_history_with_the_librarys_message_and_the_next_goes_on() -> None:
    """The stand-in server does not speak Graphiti's prompts: its replies are empty or off Graphiti's schema,
    Graphiti raises, each history fails naming the call and the library's exception (the second runs
    after the first failed), and every request the server saw is a request row."""
    from pmem.models.server import ServerThread

    with ServerThread() as server:
        agent = make_chat_model(
            {
                "backend": "openai",
                "url": server.url,
                "model": "m",
                "max_retries": 0,
                "structured": "json_object",
            }
        )
        results = run("graphiti", agent, histories(2, L=1))
        served = server.stats["requests"]
    for out, _ in results:
        assert out.history_row.status == "failed"
        assert re.search(r"PeerFailed: graphiti add_episode: \w+Error: ", out.history_row.error or "")
    chat = [r for _, recorder in results for r in recorder.rows if r.purpose != "embed"]
    assert len(chat) == served > 0 and {r.purpose for r in chat} == {"peer_write"}
    assert all(r.prompt_tokens > 0 for r in chat)


def test_a_fresh_store_answers_a_search() -> None:
    """Graphiti's Kuzu driver lists full-text indices it never creates, so its edge search failed with
    "Table RelatesToNode_ doesn't have an index with name edge_name_and_fact" on every history that
    reached a question; the arm creates them from the library's own list."""
    import asyncio

    from pmem.arms import ModelSet, make_arm
    from pmem.models import make_embedder
    from pmem.models.server import ServerThread

    (history,) = histories(1)

    async def go(url: str) -> tuple[list[str], set[str]]:
        agent = make_chat_model({"backend": "openai", "url": url, "model": "m", "max_retries": 0})
        arm = make_arm("graphiti", ModelSet(agent, make_embedder("hashing")))
        try:
            read = await arm.read(history.questions[0])
            graphiti = await arm.client()
            rows, _, _ = await graphiti.driver.execute_query("CALL SHOW_INDEXES() RETURN *;")
            return list(read.items), {r["index_name"] for r in rows}
        finally:
            await arm.aclose()

    with ServerThread() as server:
        found, indices = asyncio.run(go(server.url))
    assert found == []  # nothing written yet: an empty answer, not an exception
    assert {"edge_name_and_fact", "node_name_and_summary", "episode_content"} <= indices


def test_graphitis_clients_wait_for_the_proxy() -> None:
    """As Mem0's: the LLM, embedder and reranker clients wait :data:`~pmem.peers.LIBRARY_WAIT_S`."""
    import asyncio

    from pmem.arms import ModelSet, make_arm
    from pmem.models import make_embedder
    from pmem.models.server import ServerThread
    from pmem.peers._base import LIBRARY_WAIT_S

    async def go(url: str) -> list[float]:
        agent = make_chat_model({"backend": "openai", "url": url, "model": "m", "max_retries": 0})
        arm = make_arm("graphiti", ModelSet(agent, make_embedder("hashing")))
        try:
            graphiti = await arm.client()
            clients = (graphiti.llm_client.client, graphiti.embedder.client, graphiti.cross_encoder.client)
            return [c.timeout for c in clients]
        finally:
            await arm.aclose()

    with ServerThread() as server:
        assert asyncio.run(go(server.url)) == [LIBRARY_WAIT_S] * 3
