"""The one model interface: base classes, CallOptions, the cache/log wrapper and the replica router."""

from __future__ import annotations

import asyncio
import dataclasses
import socket
from asyncio import run
from typing import Any

import numpy as np
import pytest

from pmem.models import (
    CallContext,
    CallOptions,
    ChatModel,
    Completion,
    Embedder,
    Embedding,
    ModelCallError,
    RequestLog,
    ResponseCache,
    estimate_tokens,
    make_chat_model,
    make_embedder,
    register_chat_backend,
    register_embedder_backend,
    validate_spec,
)
from pmem.models._ring import HashRing
from pmem.models._routing import ReplicaRouter, RoutedChatModel, RoutedEmbedder
from pmem.models._types import parse_json_text

MSG = [{"role": "user", "content": "### KEY_A\na.b\n### KEY_B\na.b"}]


class Recorder(ChatModel):
    """A backend that records what it was asked and the lifecycle calls it got."""

    def __init__(self, model_id: str = "rec", text: str = "ok", fail: ModelCallError | None = None) -> None:
        self.model_id = model_id
        self.text = text
        self.fail = fail
        self.seen: list[tuple[Any, CallOptions]] = []
        self.events: list[str] = []

    @classmethod
    def from_spec(cls, spec: Any) -> Recorder:
        return cls(spec.model or "rec", text=str(spec.option("text", "ok")))

    async def generate(self, messages, options: CallOptions) -> Completion:
        self.seen.append((messages, options))
        if self.fail is not None:
            raise self.fail
        parsed, parse_error = parse_json_text(self.text) if options.schema is not None else (None, None)
        return Completion(
            self.text, self.model_id, options.purpose, 3, 1, parsed=parsed, parse_error=parse_error
        )

    async def start(self) -> list[str]:
        self.events.append("start")
        return ["http://replica/v1"]

    def stop(self) -> None:
        self.events.append("stop")

    async def aclose(self) -> None:
        self.events.append("aclose")


class Vectors(Embedder):
    def __init__(self, model_id: str = "vec", fail: ModelCallError | None = None) -> None:
        self.model_id = model_id
        self.fail = fail
        self.calls = 0

    @classmethod
    def from_spec(cls, spec: Any) -> Vectors:
        return cls()

    async def embed_usage(self, texts, *, context=None) -> Embedding:
        self.calls += 1
        if self.fail is not None:
            raise self.fail
        return Embedding(np.ones((len(texts), 2), dtype=np.float32) / np.sqrt(2), 7, False)


register_chat_backend("test-recorder", f"{__name__}:Recorder")
register_embedder_backend("test-vectors", f"{__name__}:Vectors")


def test_complete_passes_one_options_value_to_the_backend() -> None:
    m = Recorder()
    ctx = CallContext("h1", "pmem")
    c = run(
        m.complete(
            MSG, purpose="identity", max_tokens=9, temperature=0.5, schema={"type": "object"}, context=ctx
        )
    )
    assert c.text == "ok"
    ((messages, options),) = m.seen
    assert messages is MSG
    assert options == CallOptions("identity", 9, 0.5, {"type": "object"}, ctx)
    assert CallOptions("x") == CallOptions("x", max_tokens=256, temperature=0.0, schema=None, context=None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.purpose = "other"  # type: ignore[misc]


def test_a_failed_call_is_a_completion_with_the_error() -> None:
    c = run(
        Recorder(fail=ModelCallError("POST http://x/v1 failed", endpoint="http://x")).complete(
            MSG, purpose="a"
        )
    )
    assert c.error == "POST http://x/v1 failed" and c.text == "" and c.model == "rec" and c.purpose == "a"


def test_lifecycle_defaults_are_no_ops_on_every_backend() -> None:
    for model in (make_chat_model("heuristic"), make_embedder("hashing")):
        assert run(model.start()) == []
        model.stop()
        run(model.aclose())


def test_wrappers_pass_the_lifecycle_through(tmp_path) -> None:
    m = make_chat_model(
        {"backend": "test-recorder"}, cache=ResponseCache(tmp_path / "c.sqlite"), log=RequestLog()
    )
    assert run(m.start()) == ["http://replica/v1"]
    m.stop()
    run(m.aclose())
    assert m.inner.events == ["start", "stop", "aclose"]
    e = make_embedder({"backend": "test-vectors"}, log=RequestLog())
    assert run(e.start()) == [] and e.stop() is None


def test_a_backend_must_subclass_the_base_class() -> None:
    register_chat_backend("test-duck", "builtins:dict")
    with pytest.raises(TypeError, match=r"not a subclass of pmem\.models\.ChatModel"):
        make_chat_model({"backend": "test-duck"})


def test_backends_are_a_plugin_registry_like_arms_and_benchmarks() -> None:
    """The model backends use the shared registry: a model table may name a backend ``module:Class``
    (as a config names a plugin arm), and a built-in backend cannot be replaced."""
    from pmem.models import ModelSpec, ModelSpecError, chat_backends

    spec = validate_spec(ModelSpec(f"{__name__}:Recorder"))
    assert make_chat_model(spec).model_id == "rec" and make_embedder(f"{__name__}:Vectors").model_id == "vec"
    with pytest.raises(ModelSpecError, match=r"unknown chat backend 'nope' \(known: heuristic, "):
        validate_spec(ModelSpec("nope"))
    with pytest.raises(ValueError, match=r"chat backend 'openai' is built in"):
        register_chat_backend("openai", f"{__name__}:Recorder")
    assert "test-recorder" in chat_backends() and "openai" in chat_backends()


def test_cache_and_log_wrap_any_backend(tmp_path) -> None:
    cache, log = ResponseCache(tmp_path / "c.sqlite"), RequestLog()
    m = make_chat_model({"backend": "test-recorder", "text": '```json\n{"a": 1}\n```'}, cache=cache, log=log)
    schema = {"type": "object"}
    first = run(m.complete(MSG, purpose="extract", schema=schema, context=CallContext("h", "arm")))
    second = run(m.complete(MSG, purpose="extract", schema=schema, context=CallContext("h", "arm")))
    assert m.backend_calls == 1 and not first.cached and second.cached
    # a fenced JSON reply parses on a cache hit as it did when it was fresh
    assert first.parsed == second.parsed == {"a": 1} and second.parse_error is None
    assert [(r.history_id, r.arm, r.cached) for r in log.drain("h")] == [
        ("h", "arm", False),
        ("h", "arm", True),
    ]
    e = make_embedder({"backend": "test-vectors"}, cache=cache, log=log)
    v1 = run(e.embed(["x", "y"], context=CallContext("h", "arm")))
    usage = run(e.embed_usage(["x", "y"], context=CallContext("h", "arm")))
    assert e.inner.calls == 1 and np.array_equal(v1, usage.vectors)
    assert [(r.purpose, r.prompt_tokens, r.cached) for r in log.drain("h")] == [
        ("embed", 7, False),
        # the texts the cache answered: one cached row, their tokens estimated
        ("embed", estimate_tokens("x") + estimate_tokens("y"), True),
    ]


# --- the replica router -------------------------------------------------------------------------------
def down(replica: int) -> ModelCallError:
    return ModelCallError(f"replica {replica} is down", endpoint=f"http://r{replica}", failover=True)


def test_one_history_one_replica_in_ring_order() -> None:
    replicas = [Recorder(f"r{i}") for i in range(3)]
    m = RoutedChatModel("m", replicas)
    for h in (f"hist-{i}" for i in range(30)):
        c = run(m.complete(MSG, purpose="identity", context=CallContext(h)))
        assert c.model == f"r{HashRing(3).order(h)[0]}" == f"r{m.replica_for(h)}"
    assert {len(r.seen) for r in replicas} != {0}  # histories spread


def test_failover_only_when_the_replica_looks_down() -> None:
    h = "hist-1"
    first, second, third = HashRing(3).order(h)
    replicas = [Recorder(f"r{i}") for i in range(3)]
    replicas[first].fail = down(first)
    m = RoutedChatModel("m", replicas)
    c = run(m.complete(MSG, purpose="identity", context=CallContext(h)))
    assert c.error is None and c.model == f"r{second}" and m.router.failovers == 1
    # a refusal (401, another 4xx) is the call's own: not tried on another replica
    replicas[first].fail = ModelCallError(
        "POST http://r/v1 refused the credentials (HTTP 401)", failover=False
    )
    c = run(m.complete(MSG, purpose="identity", context=CallContext(h)))
    assert "HTTP 401" in c.error and len(replicas[second].seen) == 1
    # every replica down: the last error, naming its endpoint
    for i, r in enumerate(replicas):
        r.fail = down(i)
    c = run(m.complete(MSG, purpose="identity", context=CallContext(h)))
    assert c.error == f"replica {third} is down"


def test_without_a_restart_hook_a_failed_replica_keeps_its_histories() -> None:
    """A runner cannot restart the driver's replicas: a replica that failed once gets its histories back
    on the next call (one pass, no waiting)."""
    h = "hist-2"
    first = HashRing(2).order(h)[0]
    replicas = [Recorder(f"r{i}") for i in range(2)]
    replicas[first].fail = down(first)
    m = RoutedChatModel("m", replicas)
    assert run(m.complete(MSG, purpose="x", context=CallContext(h))).model != f"r{first}"
    replicas[first].fail = None
    assert run(m.complete(MSG, purpose="x", context=CallContext(h))).model == f"r{first}"


def test_with_a_restart_hook_the_second_pass_waits_for_the_restarts() -> None:
    h = "hist-3"
    replicas = [Recorder(f"r{i}") for i in range(2)]
    for i, r in enumerate(replicas):
        r.fail = down(i)
    revived: list[int] = []

    async def revive(index: int) -> None:
        await asyncio.sleep(0.01)
        replicas[index].fail = None
        revived.append(index)

    m = RoutedChatModel("m", replicas, revive=revive)
    c = run(m.complete(MSG, purpose="x", context=CallContext(h)))
    # the second pass waits for the restart of the replica it tries (the key's first): the call lands
    # there. Whether the other restart has finished by then is the event loop's timing, not asserted.
    first = HashRing(2).order(h)[0]
    assert c.error is None and c.model == f"r{first}" and revived[0] == first


def test_embedder_router_raises_the_last_error() -> None:
    bad = [Vectors(f"v{i}", fail=down(i)) for i in range(2)]
    with pytest.raises(ModelCallError, match="is down"):
        run(RoutedEmbedder("e", bad).embed(["a"], context=CallContext("h")))
    good = RoutedEmbedder("e", [Vectors("v0", fail=down(0)), Vectors("v1")])
    assert run(good.embed_usage(["a", "b"])).vectors.shape == (2, 2)


def test_router_order_puts_replicas_being_restarted_last() -> None:
    async def go() -> list[int]:
        never = asyncio.Event()

        async def revive(index: int) -> None:
            await never.wait()

        router = ReplicaRouter(3, revive)
        owner = router.order("k")[0]
        router._mark_down(owner)
        order = router.order("k")
        never.set()
        await asyncio.sleep(0)
        return [owner, *order]

    owner, *order = run(go())
    assert order[-1] == owner and sorted(order) == [0, 1, 2]


def test_hosted_routing_is_the_same_implementation(tmp_path) -> None:
    """Runners route over the driver's replicas with the same ring and rules: a dead URL fails over."""
    from pmem.models.server import ServerThread
    from pmem.runner._hosting import Hosted, RoutedChat

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}/v1"  # bound, not listening: refused
        with ServerThread() as srv:
            hosted = Hosted("agent", "heuristic", (dead, srv.url), (("max_retries", 0),))
            routed = RoutedChat(hosted)
            assert isinstance(routed, RoutedChatModel)
            owners = {h: HashRing(2).order(h)[0] for h in (f"h{i}" for i in range(20))}
            assert {routed.replica_for(h) for h in owners} == {0, 1}
            assert all(routed.replica_for(h) == o for h, o in owners.items())
            out = [run(routed.complete(MSG, purpose="identity", context=CallContext(h))) for h in owners]
            assert all(c.error is None and c.text == "same" for c in out)
            assert routed.router.failovers == sum(1 for o in owners.values() if o == 0)


def test_heuristic_takes_the_graphs_generic_key_words() -> None:
    from pmem.graph import GENERIC_KEY_WORDS
    from pmem.models import _heuristic

    assert _heuristic.GENERIC_KEY_WORDS is GENERIC_KEY_WORDS


class _Unbuildable(ChatModel):
    """A backend that cannot be built in this process (say, a credential it lacks)."""

    @classmethod
    def from_spec(cls, spec: Any) -> _Unbuildable:
        msg = "OPENAI_API_KEY"
        raise KeyError(msg)


def test_a_model_that_cannot_be_built_here_is_named_by_its_spec() -> None:
    from pmem.models import ModelSpec, model_id_of

    assert model_id_of(ModelSpec(f"{__name__}:_Unbuildable", model="the-model")) == "the-model"
