"""The `openai` backend against the real local server, including every injected fault."""

from __future__ import annotations

import asyncio
import json
import time
from asyncio import run

import numpy as np
import pytest

from pmem.models import (
    CallContext,
    CallOptions,
    ModelCallError,
    RequestLog,
    make_chat_model,
    make_embedder,
    records_to_table,
)
from pmem.models.sections import format_sections
from pmem.models.server import FAULT_KINDS, ServerThread

SCHEMA = {"type": "object", "properties": {"facts": {"type": "array"}}, "required": ["facts"]}
MSG = [
    {
        "role": "user",
        "content": format_sections({"TEXT": "Update: apple 1 has been moved from fridge 1 to table 2."}),
    }
]
FACTS = {"facts": [{"key": "apple_1.location", "value": "table 2", "status": "asserted"}]}


@pytest.fixture(scope="module")
def server():
    with ServerThread() as srv:
        yield srv


@pytest.fixture
def srv(server):
    server.set_faults(script=[], rates={}, latency_s=0.0, slow_s=30.0)
    yield server
    server.set_faults(script=[], rates={}, latency_s=0.0)


def model(srv, **opts):
    spec = {
        "backend": "openai",
        "url": srv.url,
        "model": "heuristic",
        "max_retries": 2,
        "backoff_s": 0.01,
        "timeout_s": 1.0,
        **opts,
    }
    return make_chat_model(spec)


def test_structured_output_and_usage(srv) -> None:
    log = RequestLog()
    m = make_chat_model({"backend": "openai", "url": srv.url, "model": "heuristic"}, log=log)
    for structured in ("response_format", "structured_outputs", "both"):
        m.inner.structured = structured
        c = run(m.complete(MSG, purpose="extract", schema=SCHEMA, context=CallContext("h1", "pmem")))
        assert c.error is None and c.parsed == FACTS
        assert c.prompt_tokens > 0 and c.completion_tokens > 0 and not c.tokens_estimated
    rows = log.drain("h1")
    assert len(rows) == 3 and rows[0].arm == "pmem" and rows[0].prompt_tokens == c.prompt_tokens
    table = records_to_table(rows, run_id="r1")
    assert table.column_names[:9] == [
        "history_id",
        "arm",
        "purpose",
        "model",
        "prompt_tokens",
        "completion_tokens",
        "cached",
        "latency_s",
        "error",
    ]
    assert table.column("run_id").to_pylist() == ["r1"] * 3


def test_payload_carries_vllm_fields(srv) -> None:
    m = model(srv, structured="both")
    payload = m.payload(MSG, CallOptions("extract", max_tokens=64, schema=SCHEMA))
    assert payload["chat_template_kwargs"] == {"enable_thinking": False}
    assert payload["structured_outputs"] == {"json": SCHEMA}
    assert payload["response_format"]["json_schema"]["schema"] == SCHEMA


@pytest.mark.parametrize("kind", [k for k in FAULT_KINDS if k != "malformed"])
def test_each_fault_is_retried_and_recovers(srv, kind: str) -> None:
    srv.set_faults(script=[kind], slow_s=3.0)
    before = srv.stats["requests"]
    c = run(model(srv).complete(MSG, purpose="extract", schema=SCHEMA))
    assert c.error is None and c.parsed == FACTS
    assert srv.stats["requests"] - before == 2  # the faulty attempt, then the retry
    assert srv.stats[f"fault_{kind}"] >= 1


@pytest.mark.parametrize("kind", [k for k in FAULT_KINDS if k != "malformed"])
def test_each_fault_surfaces_a_clear_error_after_the_last_retry(srv, kind: str) -> None:
    srv.set_faults(script=[kind] * 3, slow_s=3.0)
    c = run(model(srv).complete(MSG, purpose="extract", schema=SCHEMA))
    assert c.error is not None and srv.url in c.error and "after 3 attempt(s)" in c.error
    assert c.text == "" and c.parsed is None


def test_malformed_json_is_a_parse_failure_with_raw_text(srv) -> None:
    srv.set_faults(script=["malformed"])
    c = run(model(srv).complete(MSG, purpose="extract", schema=SCHEMA))
    assert c.error is None and c.parsed is None
    assert c.parse_error and "not valid JSON" in c.parse_error
    assert c.text.startswith('{"facts"') and json.dumps(FACTS) != c.text


def test_embeddings_and_their_faults(srv) -> None:
    e = make_embedder(
        {
            "backend": "openai",
            "url": srv.url,
            "model": "hashing",
            "batch_size": 2,
            "max_retries": 1,
            "backoff_s": 0.01,
        }
    )
    v = run(e.embed(["apple", "mug 1", "fridge", "table 2", "x"]))
    assert v.shape == (5, 1024) and v.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, rtol=1e-5)
    srv.set_faults(script=["500"] * 8)
    with pytest.raises(ModelCallError, match="embeddings failed after 2 attempt"):
        run(e.embed(["apple"]))


def test_bad_request_is_not_retried(srv) -> None:
    m = model(srv)
    before = srv.stats["requests"]
    c = run(m.complete([{"role": "user"}], purpose="answer"))  # no content: the server still answers
    assert c.error is None
    bad = make_chat_model(
        {"backend": "openai", "url": srv.url.replace("/v1", "/nope"), "model": "m", "max_retries": 3}
    )
    c = run(bad.complete(MSG, purpose="extract"))
    assert c.error is not None and "rejected the request: HTTP 404" in c.error
    assert (
        srv.stats["requests"] - before == 1
    )  # the 404 was not retried (and never counted as a chat request)


def test_bounded_concurrency(srv) -> None:
    srv.set_faults(latency_s=0.02)
    m = model(srv, concurrency=4, timeout_s=10.0)

    async def go():
        return await asyncio.gather(*(m.complete(MSG, purpose="extract") for _ in range(20)))

    deadline = time.monotonic() + 10
    while srv.server.inflight and time.monotonic() < deadline:  # earlier 'slow' faults still sleeping
        time.sleep(0.05)
    srv.server.inflight_max = 0
    out = run(go())
    assert all(c.error is None for c in out)
    assert 1 < srv.server.inflight_max <= 4
    assert m.client.concurrency == 4 and m.client.requests_sent == 20
