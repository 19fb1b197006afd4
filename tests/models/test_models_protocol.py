"""What issue 13 ("a real LLM through the system") added to the model layer, against real sockets:
one request row per HTTP attempt, the structured-output dialects, refusals and context overflow that are
not retried, single flight, truncated/unparseable replies kept, failover attempts, timeouts that do not
count the client's queue, and the long-context arm's budget from the agent's window."""

from __future__ import annotations

import asyncio
from asyncio import run
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from chat_server import ChatServer, Step, chat_body, serve_locally
from ports import closed_port_url

from pmem.arms import ModelSet, make_arm
from pmem.arms._baselines import LongContextArm
from pmem.bench import Event, Question
from pmem.memory.prompts import build_messages, template
from pmem.models import (
    ANY_JSON_OBJECT,
    ModelCallError,
    RequestLog,
    estimate_tokens,
    make_embedder,
    validate_spec,
)
from pmem.models._cache import ResponseCache
from pmem.models._instrument import InstrumentedChatModel, InstrumentedEmbedder
from pmem.models._llamacpp import _CLIENT_DEFAULTS
from pmem.models._log import records_from
from pmem.models._openai import OpenAIChatModel, OpenAIClient, OpenAIEmbedder, Reply
from pmem.models._routing import RoutedChatModel, RoutedEmbedder
from pmem.models._spec import STRUCTURED_DIALECTS, ModelSpec, ModelSpecError, structured_dialect
from pmem.models._tokens import FIT_CHARS_PER_TOKEN, chars_that_fit
from pmem.models._types import Attempt, CallContext, CallOptions, ChatModel, Completion, RequestRecord
from pmem.rundir import RowKeys
from pmem.runner._execute import CallRecorder, RecordingChatModel, RecordingEmbedder

SCHEMA = {"type": "object", "properties": {"facts": {"type": "array"}}, "required": ["facts"]}
MSG = [{"role": "user", "content": "Where is the apple 1?"}]
CTX = CallContext("h1", "pmem")

# llama-cpp-python's answer to a response_format it does not know (pydantic's validation error, as HTTP 500)
LLAMA_REFUSAL = {
    "error": {
        "message": (
            "1 validation error:\n  {'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), "
            "'msg': \"Input should be 'text' or 'json_object'\", 'input': 'json_schema', "
            "'ctx': {'expected': \"'text' or 'json_object'\"}}"
        ),
        "type": "internal_server_error",
        "param": None,
        "code": None,
    }
}
# llama-cpp-python's answer to a prompt longer than n_ctx
LLAMA_OVERFLOW = {
    "error": {
        "message": (
            "This model's maximum context length is 2048 tokens. However, you requested 3039 tokens "
            "(2783 in the messages, 256 in the completion). Please reduce the length of the messages "
            "or completion."
        ),
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    }
}


def chat(url: str, structured: str = "json_schema", **client: Any) -> OpenAIChatModel:
    opts = {"max_retries": 0, "backoff_s": 0.001, "timeout_s": 10.0, **client}
    return OpenAIChatModel(OpenAIClient(url, **opts), "m", structured=structured)


async def until(cond: Callable[[], bool], what: str, limit_s: float = 20.0) -> None:
    for _ in range(int(limit_s / 0.01)):
        if cond():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


# ---------------------------------------------------------------- 1. every HTTP attempt on the record


def test_a_retried_call_has_one_row_per_request() -> None:
    async def go() -> tuple[Reply, Completion, int]:
        async with ChatServer([Step(500, {"error": "boom"}), Step(200, {"n": 1})]) as srv:
            c = OpenAIClient(srv.url, max_retries=2, backoff_s=0.001)
            reply = await c.post_json("/chat/completions", {})
            await c.aclose()
        async with ChatServer(
            [Step(500, {"error": "boom"}), Step(200, chat_body("ok", usage=(17, 4)))]
        ) as srv:
            m = chat(srv.url, max_retries=2)
            completion = await m.complete(MSG, purpose="answer", context=CTX)
            await m.aclose()
            return reply, completion, len(srv.requests)

    reply, c, sent = run(go())
    assert isinstance(reply, Reply) and reply.data == {"n": 1} and reply.status == 200
    assert len(reply.failed) == 1 and isinstance(reply.failed[0], Attempt)
    assert reply.failed[0].status == 500 and "HTTP 500" in reply.failed[0].error
    assert reply.latency_s >= 0.0

    assert sent == 2 and c.error is None and c.text == "ok"
    assert c.http_status == 200 and c.finish_reason == "stop"
    assert [(a.status, "HTTP 500" in a.error) for a in c.attempts] == [(500, True)]
    rows = records_from(c, CTX)
    assert [(r.http_attempt, r.http_status) for r in rows] == [(1, 500), (2, 200)]
    assert rows[0].error is not None and "boom" in rows[0].error
    assert (rows[0].prompt_tokens, rows[0].completion_tokens) == (0, 0)
    assert rows[1].error is None and (rows[1].prompt_tokens, rows[1].completion_tokens) == (17, 4)
    assert all(r.history_id == "h1" and r.arm == "pmem" and not r.cached for r in rows)
    assert all(r.finish_reason is None for r in rows[:1]) and rows[1].finish_reason == "stop"

    log = RequestLog()
    log.add_completion(c, CTX)
    assert log.records("h1") == rows


def test_a_call_that_fails_for_good_has_a_row_for_each_attempt() -> None:
    retries = 2

    async def go() -> tuple[Completion, ModelCallError, int]:
        async with ChatServer(default=Step(503, {"error": "overloaded"})) as srv:
            m = chat(srv.url, max_retries=retries)
            completion = await m.complete(MSG, purpose="answer", context=CTX)
            with pytest.raises(ModelCallError) as raised:
                await m.generate(MSG, CallOptions("answer"))
            await m.aclose()
            return completion, raised.value, len(srv.requests)

    c, exc, sent = run(go())
    n = retries + 1
    assert sent == 2 * n  # both calls made every attempt they were allowed
    assert len(exc.attempts) == n and all(a.status == 503 for a in exc.attempts)
    assert c.error is not None and f"after {n} attempt(s)" in c.error
    assert len(c.attempts) == n
    rows = records_from(c, CTX)
    assert [r.http_attempt for r in rows] == list(range(1, n + 1))
    assert [r.http_status for r in rows] == [503] * n
    assert all(r.error for r in rows) and rows[-1].error == c.error
    assert all(r.error != c.error and "overloaded" in (r.error or "") for r in rows[:-1])
    log = RequestLog()
    log.add_completion(c, CTX)
    assert len(log) == n


def test_a_refused_connection_is_an_attempt_without_status() -> None:
    m = chat(closed_port_url(), max_retries=1)
    c = run(m.complete(MSG, purpose="answer"))
    assert c.error is not None and len(c.attempts) == 2
    rows = records_from(c, None)
    assert [(r.http_attempt, r.http_status) for r in rows] == [(1, None), (2, None)]
    assert all("cannot connect" in (r.error or "") for r in rows)


# ---------------------------------------------------------------- 2. structured-output dialects


def _sent(structured: str, schema: dict[str, Any] | None) -> dict[str, Any]:
    async def go() -> dict[str, Any]:
        async with ChatServer(default=Step(200, chat_body('{"facts": []}'))) as srv:
            m = chat(srv.url, structured)
            c = await m.complete(MSG, purpose="extract", schema=schema)
            await m.aclose()
            assert c.error is None
            return srv.requests[0]

    return run(go())


@pytest.mark.parametrize(
    ("structured", "response_format", "structured_outputs"),
    [
        (
            "json_schema",
            {"type": "json_schema", "json_schema": {"name": "output", "schema": SCHEMA, "strict": True}},
            None,
        ),
        (
            "response_format",
            {"type": "json_schema", "json_schema": {"name": "output", "schema": SCHEMA, "strict": True}},
            None,
        ),
        ("structured_outputs", None, {"json": SCHEMA}),
        (
            "both",
            {"type": "json_schema", "json_schema": {"name": "output", "schema": SCHEMA, "strict": True}},
            {"json": SCHEMA},
        ),
        ("json_object", {"type": "json_object", "schema": SCHEMA}, None),
        ("none", None, None),
    ],
)
def test_each_dialect_sends_its_field(
    structured: str, response_format: dict[str, Any] | None, structured_outputs: dict[str, Any] | None
) -> None:
    sent = _sent(structured, SCHEMA)
    assert sent.get("response_format") == response_format
    assert sent.get("structured_outputs") == structured_outputs
    plain = _sent(structured, None)  # a call without a schema asks for no structure in any dialect
    assert "response_format" not in plain and "structured_outputs" not in plain


@pytest.mark.parametrize("structured", ["json_schema", "structured_outputs", "both", "json_object"])
def test_a_call_for_any_json_object_goes_out_as_the_plain_json_mode(structured: str) -> None:
    # not as the schema {"type": "object"}: llama-cpp-python's grammar of it starves the reply
    sent = _sent(structured, ANY_JSON_OBJECT)
    assert sent.get("response_format") == {"type": "json_object"}
    assert "structured_outputs" not in sent
    assert "response_format" not in _sent("none", ANY_JSON_OBJECT)


def test_dialect_names_and_unknown_ones() -> None:
    assert set(STRUCTURED_DIALECTS) == {"json_schema", "structured_outputs", "both", "json_object", "none"}
    assert structured_dialect("response_format") == "json_schema"
    assert all(structured_dialect(d) == d for d in STRUCTURED_DIALECTS)
    assert OpenAIChatModel(
        OpenAIClient("http://127.0.0.1:1/v1"), "m", structured="response_format"
    ).structured == ("json_schema")
    with pytest.raises(ValueError, match="json_object"):
        structured_dialect("grammar")
    with pytest.raises(ValueError, match="grammar"):
        OpenAIChatModel(OpenAIClient("http://127.0.0.1:1/v1"), "m", structured="grammar")
    spec = {"backend": "openai", "url": "http://127.0.0.1:1/v1", "model": "m"}
    with pytest.raises(ModelSpecError) as raised:
        validate_spec(ModelSpec.from_mapping({**spec, "structured": "grammar"}))
    assert raised.value.key == "structured"
    for name in (*STRUCTURED_DIALECTS, "response_format"):
        validate_spec(ModelSpec.from_mapping({**spec, "structured": name}))


# ---------------------------------------------------------------- 3. a refused structured field


def test_a_refused_structured_field_fails_at_once_and_names_the_setting() -> None:
    async def go(schema: dict[str, Any] | None) -> tuple[Completion, int]:
        async with ChatServer(default=Step(500, LLAMA_REFUSAL)) as srv:
            m = chat(srv.url, "json_schema", max_retries=4)
            c = await m.complete(MSG, purpose="extract", schema=schema, context=CTX)
            await m.aclose()
            return c, len(srv.requests)

    c, sent = run(go(SCHEMA))
    assert sent == 1  # every retry would be refused alike
    assert c.error is not None and not c.overflow
    assert "'json_schema'" in c.error and "Set 'structured'" in c.error and "json_object" in c.error
    rows = records_from(c, CTX)
    assert [(r.http_attempt, r.http_status, r.error) for r in rows] == [(1, 500, c.error)]

    # the same 500 to a call that sent no structured field is a server error like any other: retried
    c, sent = run(go(None))
    assert sent == 5 and c.error is not None and "Set 'structured'" not in c.error


# ---------------------------------------------------------------- 4. context overflow


@pytest.mark.parametrize("status", [400, 500])
def test_context_overflow_is_not_retried_and_marked(status: int) -> None:
    async def go() -> tuple[Completion, int]:
        async with ChatServer(default=Step(status, LLAMA_OVERFLOW)) as srv:
            m = chat(srv.url, max_retries=3)
            c = await m.complete(MSG, purpose="answer", context=CTX)
            await m.aclose()
            return c, len(srv.requests)

    c, sent = run(go())
    assert sent == 1
    assert c.overflow and c.error is not None and "does not fit" in c.error
    assert [(r.http_attempt, r.http_status) for r in records_from(c, CTX)] == [(1, status)]


KEYS = RowKeys(
    run_id="r1",
    unit_id="u1",
    benchmark="alfworld-revision",
    subset="chains",
    history_id="h1",
    arm="pmem",
    model="m",
)


def test_the_unit_view_lets_an_overflow_through_and_raises_other_failures() -> None:
    async def go() -> tuple[Completion, CallRecorder, CallRecorder, ModelCallError]:
        async with ChatServer(default=Step(400, LLAMA_OVERFLOW)) as srv:
            overflowing = CallRecorder(KEYS)
            view = RecordingChatModel(chat(srv.url, max_retries=3), overflowing, CTX)
            c = await view.complete(MSG, purpose="answer")
        async with ChatServer(default=Step(503, {"error": "down"})) as srv:
            failing = CallRecorder(KEYS)
            view = RecordingChatModel(chat(srv.url, max_retries=1), failing, CTX)
            with pytest.raises(ModelCallError) as raised:
                await view.complete(MSG, purpose="answer")
        return c, overflowing, failing, raised.value

    c, overflowing, failing, exc = run(go())
    assert c.overflow and c.error is not None
    rows = overflowing.rows
    assert len(rows) == 1 and rows[0].error == c.error and rows[0].http_status == 400
    assert rows[0].history_id == "h1" and rows[0].agent_model == "m"
    assert "answer call to m failed" in str(exc)
    assert [(r.http_attempt, r.http_status) for r in failing.rows] == [(1, 503), (2, 503)]
    assert all(r.error for r in failing.rows)


# ---------------------------------------------------------------- 4b. embeddings: one row per request


@dataclass
class EmbeddingServer:
    """An aiohttp server on 127.0.0.1 answering ``/v1/embeddings``; ``served`` keeps each request (its
    inputs, status, and the prompt tokens it reported, distinct per request so that sums cannot
    collide). The first ``fail_first`` requests are answered 503."""

    fail_first: int = 0
    served: list[dict[str, Any]] = field(default_factory=list)
    url: str = ""
    _runner: web.AppRunner | None = None

    async def _embeddings(self, request: web.Request) -> web.Response:
        texts = (await request.json())["input"]
        if len(self.served) < self.fail_first:
            self.served.append({"inputs": texts, "status": 503, "tokens": 0})
            return web.json_response({"error": "busy"}, status=503)
        tokens = 100 * (len(self.served) + 1) + sum(len(t) for t in texts)
        self.served.append({"inputs": texts, "status": 200, "tokens": tokens})
        data = [{"index": i, "embedding": [1.0, float(len(t))]} for i, t in enumerate(texts)]
        return web.json_response({"data": data, "usage": {"prompt_tokens": tokens}})

    def embedder(self, **client: Any) -> OpenAIEmbedder:
        batch_size = client.pop("batch_size", 64)
        opts = {"max_retries": 0, "backoff_s": 0.001, "timeout_s": 10.0, **client}
        return OpenAIEmbedder(OpenAIClient(self.url, **opts), "e", batch_size=batch_size)

    def answered(self) -> list[tuple[int, int]]:
        return sorted((s["status"], s["tokens"]) for s in self.served)

    async def __aenter__(self) -> EmbeddingServer:
        app = web.Application()
        app.router.add_post("/v1/embeddings", self._embeddings)
        self._runner, self.url = await serve_locally(app)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._runner is not None
        await self._runner.cleanup()


def test_every_embedding_request_is_one_row_with_the_servers_usage(tmp_path: Path) -> None:
    """Batches, a retry and the vector cache: each HTTP request the server saw is one logged row with
    the tokens the server reported; the texts the cache answered are one cached row."""
    log = RequestLog()
    first = [f"text number {i}" for i in range(5)]
    second = [*first[:3], "a new one", "another new one"]

    async def go() -> EmbeddingServer:
        async with EmbeddingServer(fail_first=1) as srv:
            emb = InstrumentedEmbedder(
                srv.embedder(max_retries=1, batch_size=2), cache=ResponseCache(tmp_path / "c.sqlite"), log=log
            )
            await emb.embed_usage(first, context=CTX)
            await emb.embed_usage(second, context=CTX)
            await emb.aclose()
        return srv

    srv = run(go())
    rows = log.records()
    sent = [r for r in rows if r.http_status is not None]
    # 3 batches of the first call, one of them retried after a 503; 1 batch of the second call's new texts
    assert len(srv.served) == len(sent) == 5
    assert sorted((r.http_status, r.prompt_tokens) for r in sent) == srv.answered()
    assert all(r.purpose == "embed" and not r.tokens_estimated and not r.cached for r in sent)
    assert [r.error is not None for r in sent].count(True) == 1  # the 503
    cached = [(r.prompt_tokens, r.tokens_estimated) for r in rows if r.cached]
    assert cached == [(sum(estimate_tokens(t) for t in first[:3]), True)]
    assert len(rows) == len(sent) + len(cached)


def test_an_embedding_failed_over_keeps_the_dead_replicas_request() -> None:
    """A replica that answers 5xx: the call goes to the next one, and both requests are rows."""
    log = RequestLog()

    async def go() -> tuple[EmbeddingServer, EmbeddingServer]:
        async with EmbeddingServer(fail_first=10**6) as down, EmbeddingServer() as up:
            clients = [down.embedder(), up.embedder()]
            routed = RoutedEmbedder("e", clients)
            if routed.replica_for(CTX.history_id or "") != 0:  # the ring picks the primary: fail that one
                routed = RoutedEmbedder("e", clients[::-1])
            emb = InstrumentedEmbedder(routed, log=log)
            await emb.embed_usage(["one", "two"], context=CTX)
            await emb.aclose()
        return down, up

    down, up = run(go())
    rows = log.records()
    assert down.answered() == [(503, 0)] and len(up.served) == 1
    assert [(r.http_attempt, r.http_status, r.prompt_tokens) for r in rows] == [
        (1, 503, 0),
        (2, 200, up.served[0]["tokens"]),
    ]
    assert rows[0].error and rows[1].error is None


def test_the_unit_view_records_each_embedding_request_and_each_failed_attempt() -> None:
    """A unit's embedder (the runner's view): one row per request the server answered, with its usage;
    a call that failed for good: one row per attempt, the call's message on the last."""

    async def go() -> tuple[EmbeddingServer, EmbeddingServer, CallRecorder, CallRecorder]:
        good, bad = CallRecorder(KEYS), CallRecorder(KEYS)
        async with EmbeddingServer() as ok, EmbeddingServer(fail_first=10**6) as down:
            await RecordingEmbedder(ok.embedder(batch_size=1), good, CTX).embed(["a", "b", "c"])
            with pytest.raises(ModelCallError):
                await RecordingEmbedder(down.embedder(max_retries=1), bad, CTX).embed(["a"])
        return ok, down, good, bad

    ok, down, good, bad = run(go())
    assert sorted((r.http_status, r.prompt_tokens) for r in good.rows) == ok.answered()
    assert len(good.rows) == 3 and all(r.history_id == "h1" and r.purpose == "embed" for r in good.rows)
    assert [(r.http_attempt, r.http_status) for r in bad.rows] == [(1, 503), (2, 503)]
    assert len(down.served) == 2 and "ModelCallError" in (bad.rows[-1].error or "")


# ---------------------------------------------------------------- 5. single flight


def test_identical_concurrent_calls_are_sent_once(tmp_path: Path) -> None:
    async def go() -> tuple[list[Completion], list[Completion], Completion, RequestLog, int, int, int]:
        async with ChatServer(default=Step(delay=0.2)) as srv:
            log = RequestLog()
            m = InstrumentedChatModel(chat(srv.url), cache=None, log=log)
            same = await asyncio.gather(*(m.complete(MSG, purpose="answer", context=CTX) for _ in range(6)))
            after_same = len(srv.requests)
            prompts = [[{"role": "user", "content": f"question {i}"}] for i in range(3)]
            different = await asyncio.gather(*(m.complete(p, purpose="answer") for p in prompts))
            after_different = len(srv.requests)

            cached = InstrumentedChatModel(chat(srv.url), cache=ResponseCache(tmp_path / "c.sqlite"))
            await asyncio.gather(*(cached.complete(MSG, purpose="answer") for _ in range(3)))
            before_hit = len(srv.requests)
            hit = await cached.complete(MSG, purpose="answer")
            hit_requests = len(srv.requests) - before_hit
            await m.aclose()
            await cached.aclose()
            return same, different, hit, log, after_same, after_different, hit_requests

    same, different, hit, log, after_same, after_different, hit_requests = run(go())
    assert after_same == 1
    assert all(c.error is None and c.text == same[0].text for c in same)
    rows = log.records("h1")
    assert len(rows) == 6
    sent = [r for r in rows if not r.cached]
    shared = [r for r in rows if r.cached]
    assert len(sent) == 1 and (sent[0].http_attempt, sent[0].http_status) == (1, 200)
    assert len(shared) == 5 and all(r.http_attempt is None and r.http_status is None for r in shared)

    assert after_different == 1 + 3  # different prompts are not merged
    assert len({c.text for c in different}) == 3

    assert hit_requests == 0 and hit.cached and hit.error is None and hit.text == same[0].text
    assert [r.http_attempt for r in records_from(hit, None)] == [None]


def test_a_cancelled_first_caller_leaves_the_waiting_one_an_answer() -> None:
    async def go() -> tuple[Completion, bool, int]:
        # the first request hangs until the server closes; the second is answered at once
        async with ChatServer([Step(delay=60.0)]) as srv:
            m = InstrumentedChatModel(chat(srv.url, timeout_s=120.0), log=RequestLog())
            first = asyncio.create_task(m.complete(MSG, purpose="answer"))
            await until(lambda: len(srv.requests) == 1, "the first request")
            second = asyncio.create_task(m.complete(MSG, purpose="answer"))
            for _ in range(20):  # let the second call reach the shared reply and wait on it
                await asyncio.sleep(0.005)
            first.cancel()
            c = await asyncio.wait_for(second, 30.0)
            try:
                await first
            except asyncio.CancelledError:
                cancelled = True
            else:
                cancelled = False
            await m.aclose()
            return c, cancelled, len(srv.requests)

    c, cancelled, sent = run(go())
    assert cancelled
    assert c.error is None and not c.cached and c.http_status == 200
    assert sent == 2  # the waiting call made its own request


# ---------------------------------------------------------------- 6. truncated and unparseable replies


def _replies(*steps: tuple[str, str | None, dict[str, Any] | None]) -> list[Completion]:
    async def go() -> list[Completion]:
        script = [Step(200, chat_body(text, finish=finish)) for text, finish, _ in steps]
        async with ChatServer(script) as srv:
            m = chat(srv.url)
            out = [await m.complete(MSG, purpose="extract", schema=schema) for _, _, schema in steps]
            await m.aclose()
            return out

    return run(go())


def test_truncated_and_unparseable_replies_keep_their_text() -> None:
    truncated, cut_json, garbled, fine = _replies(
        ("The apple 1 is in the fri", "length", None),
        ('{"facts": [{"key": "apple', "length", SCHEMA),
        ("I think the apple is in the fridge.", "stop", SCHEMA),
        ('{"facts": []}', "stop", SCHEMA),
    )
    assert truncated.truncated and truncated.error is None
    (row,) = records_from(truncated, CTX)
    assert (
        row.finish_reason == "length" and row.reply == "The apple 1 is in the fri" and row.parse_error is None
    )

    assert cut_json.truncated and cut_json.parse_error is not None
    (row,) = records_from(cut_json, CTX)
    assert row.reply == '{"facts": [{"key": "apple' and row.parse_error == cut_json.parse_error

    assert not garbled.truncated and garbled.parsed is None and garbled.error is None
    (row,) = records_from(garbled, CTX)
    assert row.parse_error and "not valid JSON" in row.parse_error
    assert row.reply == "I think the apple is in the fridge." and row.error is None

    assert fine.parsed == {"facts": []} and not fine.truncated
    (row,) = records_from(fine, CTX)
    assert row.reply is None and row.parse_error is None and row.finish_reason == "stop"


# ---------------------------------------------------------------- 7. router failover


def _history_routed_first_to(model: RoutedChatModel, replica: int) -> str:
    return next(h for h in (f"h{i}" for i in range(1000)) if model.replica_for(h) == replica)


@pytest.mark.parametrize("fault", ["down", "503"])
def test_failover_keeps_the_failed_replicas_requests(fault: str) -> None:
    async def go() -> tuple[Completion, int]:
        async with (
            ChatServer(default=Step(503, {"error": "replica a is sick"})) as a_srv,
            ChatServer() as b_srv,
        ):
            a_url = closed_port_url() if fault == "down" else a_srv.url
            routed = RoutedChatModel("m", [chat(a_url, max_retries=1), chat(b_srv.url, max_retries=1)])
            ctx = CallContext(_history_routed_first_to(routed, 0), "pmem")
            c = await routed.complete(MSG, purpose="answer", context=ctx)
            await routed.aclose()
            assert len(b_srv.requests) == 1
            return c, len(a_srv.requests)

    c, a_requests = run(go())
    assert c.error is None and c.http_status == 200
    assert a_requests == (0 if fault == "down" else 2)
    want_status = None if fault == "down" else 503
    assert [a.status for a in c.attempts] == [want_status, want_status]
    rows = records_from(c, None)
    assert [(r.http_attempt, r.http_status) for r in rows] == [(1, want_status), (2, want_status), (3, 200)]
    assert [r.error is not None for r in rows] == [True, True, False]
    assert rows[-1].prompt_tokens == 11 and rows[-1].completion_tokens == 3


# ---------------------------------------------------------------- 8. timeouts measure the call


def test_a_timeout_does_not_count_the_clients_queue() -> None:
    calls, held_s, timeout_s = 6, 0.5, 1.5  # served one at a time: the last call is done after ~3 s

    async def go(concurrency: int) -> list[Completion]:
        async with ChatServer(serial_s=held_s) as srv:
            m = chat(srv.url, concurrency=concurrency, timeout_s=timeout_s, max_retries=0)
            out = await asyncio.gather(*(m.complete(MSG, purpose="answer") for _ in range(calls)))
            await m.aclose()
            return list(out)

    queued = run(go(1))
    assert [c.error for c in queued] == [None] * calls  # each waited in the client, untimed
    # sent at once, the calls wait in the server's queue, where the clock runs: some time out
    flooded = run(go(calls))
    assert any(c.error is not None and "timed out" in c.error for c in flooded)
    # hence llama.cpp's replicas (one request at a time) get one request in flight per client
    assert _CLIENT_DEFAULTS["concurrency"] == 1


def test_llama_cpps_default_timeout_covers_a_full_window_and_the_longest_peer_reply_with_room() -> None:
    """The former 600 s cut a Mem0 extraction call short in the accuracy run while the replica wrote it."""
    prompt_per_s, reply_per_s = (
        82,
        4.7,
    )  # one-thread replica of the 1.5B model, measured (pmem.models._llamacpp)
    longest_s = 16_384 / prompt_per_s + 4_096 / reply_per_s
    assert _CLIENT_DEFAULTS["timeout_s"] >= 1.5 * longest_s


# ---------------------------------------------------------------- 9. the long-context arm's budget


class _Windowed(ChatModel):
    """An agent that only says how long its context is (the arm's read makes no call)."""

    model_id = "windowed"

    def __init__(self, context_tokens: int | None) -> None:
        self.context_tokens = context_tokens

    async def generate(self, messages, options):  # pragma: no cover - reads make no call
        raise AssertionError("no call expected")


Q = Question("q", "Where is the apple 1 now?", ("fridge 1",), "current", 0)
EVENTS = [
    Event(i, f"Earlier observation: apple {i} was in fridge {i % 7}.", source="environment")
    for i in range(60)
]


def _long_context(context_tokens: int | None, **options: Any) -> LongContextArm:
    arm = make_arm("long-context", ModelSet(_Windowed(context_tokens), make_embedder("hashing")), options)
    assert isinstance(arm, LongContextArm)
    run(arm.ingest(EVENTS))
    return arm


def test_chars_that_fit() -> None:
    assert FIT_CHARS_PER_TOKEN == 3.0
    assert chars_that_fit(1000) == 3000 and chars_that_fit(0) == 0 and chars_that_fit(-5) == 0


def test_long_context_keeps_what_fits_the_agents_window() -> None:
    window = 600
    arm = _long_context(window)
    read = run(arm.read(Q))
    lines = read.text.splitlines()
    dropped = arm.extra()["dropped_events"]["q"]
    assert 0 < len(lines) < len(EVENTS) and dropped == len(EVENTS) - len(lines)
    # the most recent events, oldest first
    assert lines == [e.text for e in EVENTS[-len(lines) :]]
    # the answer prompt around it fits the window beside the reply, counted at FIT_CHARS_PER_TOKEN
    prompt = build_messages("answer", CONTEXT=read.text, QUESTION=Q.text, DATE="")
    assert sum(len(m["content"]) for m in prompt) <= chars_that_fit(window - template("answer").max_tokens)
    # ... and the next older event would not have fitted the budget
    budget = arm.budget_chars(Q)
    assert read.chars <= budget < read.chars + 1 + len(EVENTS[-len(lines) - 1].text)

    # a window twice as large keeps more
    wider = _long_context(2 * window)
    assert len(run(wider.read(Q)).text.splitlines()) > len(lines)
    assert wider.extra()["dropped_events"]["q"] < dropped


def test_long_context_without_a_window_uses_max_chars() -> None:
    everything = _long_context(None)
    read = run(everything.read(Q))
    assert read.text.splitlines() == [e.text for e in EVENTS]
    assert everything.extra()["dropped_events"] == {"q": 0}
    assert everything.budget_chars(Q) == everything.max_chars == 56_000

    capped = _long_context(None, max_chars=200)
    read = run(capped.read(Q))
    assert 0 < read.chars <= 200 and capped.extra()["dropped_events"]["q"] == len(EVENTS) - len(
        read.text.splitlines()
    )
    # a window larger than max_chars does not lift the cap
    assert _long_context(100_000, max_chars=200).budget_chars(Q) == 200


def test_a_reply_without_choices_is_an_attempt_of_its_own() -> None:
    """500, then a 200 whose body has no ``choices``: the server got 2 requests, the log has 2 rows."""

    async def go() -> tuple[list[RequestRecord], int]:
        seen = 0

        async def handler(request: web.Request) -> web.Response:
            nonlocal seen
            seen += 1
            if seen == 1:
                return web.Response(status=500, text="busy")
            return web.json_response({"foo": 1})

        app = web.Application()
        app.router.add_post("/v1/chat/completions", handler)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        try:
            m = OpenAIChatModel(
                OpenAIClient(f"http://127.0.0.1:{port}/v1", max_retries=2, backoff_s=0.01), "m"
            )
            c = await m.complete([{"role": "user", "content": "hi"}], purpose="answer")
            await m.aclose()
            return records_from(c, None), seen
        finally:
            await runner.cleanup()

    rows, seen = asyncio.run(go())
    assert seen == 2
    assert [(r.http_attempt, r.http_status) for r in rows] == [(1, 500), (2, 200)]
    assert "no choices[0].message" in (rows[-1].error or "")


def test_reply_token_limit_caps_max_tokens_before_the_cache_key(tmp_path: Path) -> None:
    """``max_reply_tokens`` bounds what the server is asked for, and the cache keys the capped call."""

    class Echo(ChatModel):
        model_id = "echo"
        reply_token_limit = 64

        def __init__(self) -> None:
            self.asked: list[int] = []

        async def generate(self, messages: Any, options: CallOptions) -> Completion:
            self.asked.append(options.max_tokens)
            return Completion("ok", self.model_id, options.purpose, 1, 1)

    inner = Echo()
    cache = ResponseCache(tmp_path / "c.sqlite")
    model = InstrumentedChatModel(inner, cache=cache)
    assert model.reply_token_limit == 64
    asyncio.run(model.complete(MSG, purpose="extract", max_tokens=2048))
    asyncio.run(model.complete(MSG, purpose="extract", max_tokens=32))
    assert inner.asked == [64, 32]
    # the capped call is what the cache holds: asking again for 2048 (capped to 64) is a hit
    again = asyncio.run(model.complete(MSG, purpose="extract", max_tokens=4096))
    assert again.cached and inner.asked == [64, 32]
    spec_model = OpenAIChatModel.from_spec(
        ModelSpec.from_mapping(
            {"backend": "openai", "url": "http://127.0.0.1:9/v1", "model": "m", "max_reply_tokens": 100}
        )
    )
    assert spec_model.reply_token_limit == 100


def test_least_busy_routing_sends_a_call_to_the_idle_replica() -> None:
    """llama.cpp replicas serve one request at a time: a second call of the same history goes to the idle
    replica (affinity routing would queue it behind the first)."""
    from pmem.models._llamacpp import LlamaCppChatModel
    from pmem.models._routing import ReplicaRouter

    async def go(policy: str) -> list[int]:
        router = ReplicaRouter(2, policy=policy)
        release = asyncio.Event()
        used: list[int] = []

        async def call(index: int) -> int:
            used.append(index)
            await release.wait()
            return index

        first = asyncio.ensure_future(router.route("h1", call))
        await asyncio.sleep(0)
        second = asyncio.ensure_future(router.route("h1", call))
        await asyncio.sleep(0)
        release.set()
        await asyncio.gather(first, second)
        assert router.in_flight == [0, 0]
        return used

    least = asyncio.run(go("least-busy"))
    assert sorted(least) == [0, 1]
    affinity = asyncio.run(go("affinity"))
    assert affinity[0] == affinity[1]
    assert LlamaCppChatModel.routing == "least-busy"
    with pytest.raises(ValueError, match="routing"):
        ReplicaRouter(2, policy="random")
