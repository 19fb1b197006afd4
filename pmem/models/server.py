"""A local OpenAI-compatible server for the heuristic agent and the hashing embedder, with faults.

``pmem serve --port 8000`` (or ``python -m pmem.models.server``) serves ``/v1/chat/completions``,
``/v1/embeddings``, ``/v1/models`` and ``/health`` on 127.0.0.1. It is what the tests point the
`openai` backend at, and what the `vllm` launcher starts in place of ``vllm serve`` on a machine
without GPUs.

Faults, for testing clients: a fixed ``--latency-ms`` per request; random faults at given rates
(``--rate-429 0.1 --rate-500 0.1 --rate-slow 0.05 --rate-malformed 0.05 --rate-drop 0.05
--rate-garbage 0.05``); or a scripted queue consumed one per request, set at run time with
``POST /_control/faults {"script": ["429", "500", "drop"]}``. Fault kinds:

=========  ==============================================================================
429        HTTP 429 with ``Retry-After: 0``
500        HTTP 500
slow       the reply is delayed by ``slow_s`` (default 30 s): the client's timeout fires
malformed  HTTP 200 whose message content is truncated JSON (a parse failure for the caller)
garbage    HTTP 200 whose body is not JSON at all
drop       the connection is closed without a reply
=========  ==============================================================================

``GET /_control/stats`` returns request counters (used by tests to count backend calls).

It runs on ``aiohttp.web`` (keep-alive, any request framing); the fixed latency is counted from the
moment the handler gets the request.

Credentials: with ``--api-key KEY`` (or the ``PMEM_API_KEY`` environment variable, which keeps the key
out of the process list) every route but ``/health`` requires ``Authorization: Bearer KEY``, as
``vllm serve --api-key`` does for ``/v1``; anything else is answered 401 with an OpenAI-style error.

>>> with ServerThread() as srv:  # doctest: +SKIP
...     print(srv.url)           # http://127.0.0.1:PORT/v1
"""

from __future__ import annotations

import argparse
import asyncio
import hmac
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from pmem.graph import HASHING_DIM
from pmem.models._hashing import HashingEmbedder
from pmem.models._heuristic import MODEL_ID, respond
from pmem.models._loop import run as run_loop
from pmem.models._tokens import estimate_prompt_tokens, estimate_tokens

_MAX_BODY = 256 * 1024 * 1024  # long-context prompts are large
FAULT_KINDS = ("429", "500", "slow", "malformed", "garbage", "drop")
#: The environment variable the server reads its key from (the launcher sets it for replicas).
API_KEY_ENV = "PMEM_API_KEY"
#: Routes open without a key: the launcher's (and any load balancer's) health probe.
_OPEN_PATHS = frozenset({"/health"})


@dataclass
class Faults:
    latency_s: float = 0.0
    slow_s: float = 30.0
    rates: dict[str, float] = field(default_factory=dict)
    script: deque[str] = field(default_factory=deque)
    seed: int = 0
    _rng: random.Random = field(default_factory=random.Random, repr=False)

    def __post_init__(self) -> None:
        self._rng.seed(self.seed)
        bad = set(self.rates) - set(FAULT_KINDS)
        if bad:
            msg = f"unknown fault kind(s) {sorted(bad)}; known: {', '.join(FAULT_KINDS)}"
            raise ValueError(msg)

    def next(self) -> str | None:
        if self.script:
            kind = self.script.popleft()
            return None if kind in ("", "ok", "none") else kind
        if self.rates:
            x = self._rng.random()
            for kind in FAULT_KINDS:
                p = self.rates.get(kind, 0.0)
                if x < p:
                    return kind
                x -= p
        return None

    def update(self, body: dict[str, Any]) -> None:
        if "latency_s" in body:
            self.latency_s = float(body["latency_s"])
        if "slow_s" in body:
            self.slow_s = float(body["slow_s"])
        if "rates" in body:
            rates = {str(k): float(v) for k, v in dict(body["rates"]).items()}
            bad = set(rates) - set(FAULT_KINDS)
            if bad:
                msg = f"unknown fault kind(s) {sorted(bad)}; known: {', '.join(FAULT_KINDS)}"
                raise ValueError(msg)
            self.rates = rates
        if "script" in body:
            script = [str(k) for k in body["script"]]
            bad = set(script) - set(FAULT_KINDS) - {"ok", "none", ""}
            if bad:
                msg = f"unknown fault kind(s) {sorted(bad)}; known: {', '.join(FAULT_KINDS)}"
                raise ValueError(msg)
            self.script = deque(script)


class StandInServer:
    """The stand-in's routes and state; one instance per process (served by :meth:`start`, or mounted
    in an aiohttp application with :meth:`app`)."""

    def __init__(
        self,
        model: str = MODEL_ID,
        embed_model: str | None = None,
        embed_dim: int = HASHING_DIM,
        faults: Faults | None = None,
        api_key: str | None = None,
        cut_replies: bool = False,
    ) -> None:
        self.model = model
        # cut a reply past the request's max_tokens there (finish_reason "length"), as a model server does;
        # off by default: tokens are estimated (4 bytes a token), and a one-word reply such as
        # "different" that a real tokenizer counts as 1 token would be cut at max_tokens 2
        self.cut_replies = cut_replies
        # kept as the whole expected header value, compared in constant time (no prefix or timing oracle)
        self._expected_auth = f"Bearer {api_key}".encode() if api_key else None
        self.embed_dim = embed_dim
        self._embedder: HashingEmbedder | None = None  # scikit-learn loads on first use: fast (re)starts
        self.embed_model = embed_model or f"hashing-char24-{embed_dim}"
        self.faults = faults or Faults()
        self.stats: Counter[str] = Counter()
        self.inflight = 0
        self.inflight_max = 0
        #: the largest ``max_tokens`` a chat request asked for (the heuristic's replies are short and are
        #: not cut to it unless ``cut_replies``; tests read what clients asked)
        self.largest_reply_asked = 0
        self._memo: dict[str, tuple[str, int, int]] = {}

    def app(self) -> web.Application:
        """The routes as an aiohttp Application (served by :meth:`start`, or mounted in another app)."""

        @web.middleware
        async def auth(request: web.Request, handler: Any) -> web.StreamResponse:
            # before routing: an unknown path tells a caller without the key nothing either
            refused = self._refuse(request)
            return refused if refused is not None else await handler(request)

        # without a key, no middleware: every request would pay for the call
        app = web.Application(client_max_size=_MAX_BODY, middlewares=[auth] if self._expected_auth else [])
        app.router.add_get("/health", self._health)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/embeddings", self._embeddings)
        app.router.add_post("/_control/faults", self._set_faults)
        app.router.add_get("/_control/stats", self._stats)
        app.router.add_post("/_control/reset", self._reset)
        return app

    async def start(self, host: str, port: int, *, reuse_port: bool = False) -> web.AppRunner:
        """Serve :meth:`app` on host:port (``port`` 0: any free one, see ``runner.addresses``)."""
        # no access log (it would cost more than a request); a handler still sleeping when the server
        # stops (the "slow" fault) is cancelled after a second
        runner = web.AppRunner(self.app(), access_log=None, handle_signals=False, shutdown_timeout=1.0)
        await runner.setup()
        await web.TCPSite(runner, host, port, reuse_port=reuse_port or None).start()
        return runner

    async def stop(self, runner: web.AppRunner) -> None:
        """Stop listening, close open keep-alive connections and end their handlers."""
        await runner.cleanup()

    def _refuse(self, request: web.Request) -> web.Response | None:
        """A 401 for a request without the right bearer token (None when it may proceed)."""
        if self._expected_auth is None or request.path in _OPEN_PATHS:
            return None
        got = request.headers.get("Authorization", "").encode("latin-1", "replace")
        if hmac.compare_digest(got, self._expected_auth):
            return None
        self.stats["unauthorized"] += 1
        # OpenAI's shape and wording; the body never echoes what the caller sent
        error = {
            "message": "Incorrect or missing API key: send 'Authorization: Bearer <key>'.",
            "type": "invalid_request_error",
            "param": None,
            "code": "invalid_api_key",
        }
        return web.json_response({"error": error}, status=401, headers={"WWW-Authenticate": "Bearer"})

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _models(self, request: web.Request) -> web.Response:
        data = [{"id": m, "object": "model", "owned_by": "pmem"} for m in (self.model, self.embed_model)]
        return web.json_response({"object": "list", "data": data})

    async def _fault(self, request: web.Request, kind: str | None) -> web.StreamResponse | None:
        if kind is not None:
            self.stats[f"fault_{kind}"] += 1
        if kind == "429":
            return web.json_response(
                {"error": {"message": "rate limited (injected)", "type": "rate_limit"}},
                status=429,
                headers={"Retry-After": "0"},
            )
        if kind == "500":
            return web.json_response({"error": {"message": "internal error (injected)"}}, status=500)
        if kind == "slow":
            await asyncio.sleep(self.faults.slow_s)
        if kind == "garbage":
            return web.Response(text="<html>not json (injected)", content_type="application/json")
        if kind == "drop":
            if request.transport is not None:
                request.transport.close()
            return web.Response(status=204)  # never reaches the client: the socket is already closed
        return None

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        self.inflight += 1
        self.inflight_max = max(self.inflight_max, self.inflight)
        try:
            return await self._chat_inner(request)
        finally:
            self.inflight -= 1

    async def _chat_inner(self, request: web.Request) -> web.StreamResponse:
        # The fixed latency runs from the request's arrival: the server's own work happens inside it, as
        # in a batching model server, so the latency a client sees is the configured one.
        deadline = time.monotonic() + self.faults.latency_s
        self.stats["requests"] += 1
        try:
            body = await request.json()
            messages = list(body["messages"])
            asked = int(body.get("max_tokens") or body.get("max_completion_tokens") or 0)
        except (ValueError, KeyError, TypeError) as exc:
            return web.json_response({"error": {"message": f"bad request: {exc}"}}, status=400)
        self.largest_reply_asked = max(self.largest_reply_asked, asked)
        kind = self.faults.next()
        text, prompt, completion = self._reply(messages, request.headers.get("X-Purpose"), body)
        if self.faults.latency_s:
            await asyncio.sleep(max(0.0, deadline - time.monotonic()))
        early = await self._fault(request, kind)
        if early is not None:
            return early
        if kind == "malformed":
            text = text[: max(1, len(text) // 2)] if text.startswith("{") else '{"' + text
        finish = "stop"
        if self.cut_replies and 0 < asked < completion:
            text, completion, finish = _cut_to_tokens(text, asked), asked, "length"
        self.stats["chat"] += 1
        payload = {
            "id": f"chatcmpl-{uuid.uuid4().hex[:16]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model") or self.model,
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}
            ],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            },
        }
        return web.Response(
            body=json.dumps(payload, ensure_ascii=False).encode("utf-8"), content_type="application/json"
        )

    def _reply(
        self, messages: list[dict[str, str]], purpose: str | None, body: dict[str, Any]
    ) -> tuple[str, int, int]:
        # The agent is deterministic, so identical requests are answered from a bounded memo: the server
        # then costs little next to the client it is used to measure.
        schema = _schema_of(body)
        key = json.dumps([messages, purpose, schema], sort_keys=True)
        hit = self._memo.get(key)
        if hit is None:
            text = respond(messages, purpose, schema)
            hit = (text, estimate_prompt_tokens(messages), estimate_tokens(text))
            if len(self._memo) >= 4096:
                self._memo.clear()
            self._memo[key] = hit
        return hit

    async def _embeddings(self, request: web.Request) -> web.StreamResponse:
        self.stats["requests"] += 1
        try:
            body = await request.json()
            texts = body["input"]
        except (ValueError, KeyError, TypeError) as exc:
            return web.json_response({"error": {"message": f"bad request: {exc}"}}, status=400)
        kind = self.faults.next()
        if self.faults.latency_s:
            await asyncio.sleep(self.faults.latency_s)
        early = await self._fault(request, None if kind == "malformed" else kind)
        if early is not None:
            return early
        texts = [texts] if isinstance(texts, str) else [str(t) for t in texts]
        if self._embedder is None:
            self._embedder = HashingEmbedder(dim=self.embed_dim)
        vectors = self._embedder.embed_sync(texts)
        self.stats["embeddings"] += 1
        tokens = sum(estimate_tokens(t) for t in texts)
        data = [{"object": "embedding", "index": i, "embedding": v.tolist()} for i, v in enumerate(vectors)]
        return web.json_response(
            {
                "object": "list",
                "data": data,
                "model": body.get("model") or self.embed_model,
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            }
        )

    async def _set_faults(self, request: web.Request) -> web.Response:
        try:
            self.faults.update(await request.json())
        except (ValueError, TypeError) as exc:
            return web.json_response({"error": {"message": str(exc)}}, status=400)
        return web.json_response({"ok": True, "script": list(self.faults.script), "rates": self.faults.rates})

    async def _stats(self, request: web.Request) -> web.Response:
        return web.json_response(dict(self.stats))

    async def _reset(self, request: web.Request) -> web.Response:
        self.stats.clear()
        self.faults.script.clear()
        self.faults.rates = {}
        self.faults.latency_s = 0.0
        return web.json_response({"ok": True})


def _cut_to_tokens(text: str, tokens: int) -> str:
    """The longest start of ``text`` that :func:`estimate_tokens` counts as at most ``tokens``."""
    cut = text[: tokens * 4]
    while cut and estimate_tokens(cut) > tokens:
        cut = cut[:-1]
    return cut


def _schema_of(body: dict[str, Any]) -> dict[str, Any] | None:
    rf = body.get("response_format") or {}
    if isinstance(rf, dict) and rf.get("type") == "json_schema":
        js = rf.get("json_schema") or {}
        return js.get("schema") or {}
    so = body.get("structured_outputs") or {}
    if isinstance(so, dict) and so.get("json") is not None:
        js = so["json"]
        return json.loads(js) if isinstance(js, str) else js
    return None


class ServerThread:
    """A stand-in server on 127.0.0.1 in a background thread (its own event loop); a context manager."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, **kwargs: Any) -> None:
        self.host, self.port = host, port
        self.server = StandInServer(**kwargs)
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pmem-standin", daemon=True)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    @property
    def faults(self) -> Faults:
        return self.server.faults

    @property
    def stats(self) -> Counter[str]:
        return self.server.stats

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        runner = self._loop.run_until_complete(self.server.start(self.host, self.port))
        self.port = runner.addresses[0][1]
        self._ready.set()
        self._loop.run_forever()
        self._loop.run_until_complete(self.server.stop(runner))
        self._loop.close()

    def start(self) -> ServerThread:
        self._thread.start()
        if not self._ready.wait(30):
            msg = f"stand-in server on {self.host} did not start within 30 s"
            raise RuntimeError(msg)
        return self

    def set_faults(self, **body: Any) -> None:
        """Thread-safe fault update (same fields as ``POST /_control/faults``)."""
        done = threading.Event()

        def apply() -> None:
            try:
                self.server.faults.update(body)
            finally:
                done.set()

        self._loop.call_soon_threadsafe(apply)
        done.wait(10)

    def stop(self) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(30)

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# --- CLI ----------------------------------------------------------------------------------------------
def _port(text: str) -> int:
    """A TCP port (0: any free one); the socket layer would quietly take a larger number modulo 65536."""
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        msg = f"{text!r} is not a TCP port (0-65535)"
        raise argparse.ArgumentTypeError(msg)
    return port


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    parser.add_argument("--port", type=_port, default=8000, help="port to listen on (default: %(default)s)")
    parser.add_argument("--model", default=MODEL_ID, help="model id reported for chat (default: %(default)s)")
    parser.add_argument(
        "--embed-model", default=None, help="model id reported for embeddings (default: hashing-char24-DIM)"
    )
    parser.add_argument(
        "--embed-dim",
        type=int,
        default=HASHING_DIM,
        help="dimension of the hashing embedder's vectors (default: %(default)s)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="server processes sharing the port through SO_REUSEPORT (default: %(default)s)",
    )
    parser.add_argument(
        "--latency-ms",
        type=float,
        default=0.0,
        help="fixed latency of every chat and embedding reply, counted from the request's "
        "arrival (default: %(default)s)",
    )
    parser.add_argument(
        "--slow-s",
        type=float,
        default=30.0,
        help="how long a 'slow' fault delays its reply (default: %(default)s)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of the random fault draws (worker N uses SEED+N) (default: %(default)s)",
    )
    parser.add_argument(
        "--api-key",
        default=None,
        help=f"require 'Authorization: Bearer KEY' on every route but /health (default: "
        f"${API_KEY_ENV}; the variable keeps the key out of the process list)",
    )
    for kind in FAULT_KINDS:
        parser.add_argument(
            f"--rate-{kind}",
            type=float,
            default=0.0,
            help=f"probability that a request gets a '{kind}' fault (default: %(default)s)",
        )
    parser.add_argument("--worker-child", action="store_true", help=argparse.SUPPRESS)


def run(args: argparse.Namespace) -> int:
    rates = {k: getattr(args, f"rate_{k}") for k in FAULT_KINDS if getattr(args, f"rate_{k}")}
    faults = Faults(latency_s=args.latency_ms / 1000.0, slow_s=args.slow_s, rates=rates, seed=args.seed)
    api_key = args.api_key or os.environ.get(API_KEY_ENV) or None
    server = StandInServer(
        model=args.model,
        embed_model=args.embed_model,
        embed_dim=args.embed_dim,
        faults=faults,
        api_key=api_key,
    )
    children: list[subprocess.Popen[bytes]] = []
    # worker processes get the key through their environment, never on their command line
    child_env = {**os.environ, API_KEY_ENV: api_key} if api_key else None
    if args.workers > 1 and not args.worker_child:
        argv = [
            "--host",
            args.host,
            "--port",
            str(args.port),
            "--model",
            args.model,
            "--embed-dim",
            str(args.embed_dim),
            "--latency-ms",
            str(args.latency_ms),
            "--slow-s",
            str(args.slow_s),
        ]
        if args.embed_model:
            argv += ["--embed-model", args.embed_model]
        for kind, rate in rates.items():
            argv += [f"--rate-{kind}", str(rate)]
        for i in range(args.workers - 1):
            argv_i = [*argv, "--seed", str(args.seed + i + 1)]
            children.append(
                subprocess.Popen(
                    [sys.executable, "-m", "pmem.models.server", *argv_i, "--worker-child"], env=child_env
                )
            )

    async def serve() -> None:
        # every process on the port must ask for SO_REUSEPORT, the workers too (they get no --workers)
        runner = await server.start(args.host, args.port, reuse_port=args.workers > 1 or args.worker_child)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        if not args.worker_child:
            auth = " (API key required)" if api_key else ""
            print(f"serving {args.model} on http://{args.host}:{args.port}/v1{auth}", flush=True)
        await stop.wait()
        await server.stop(runner)

    try:
        run_loop(serve())
    finally:
        for child in children:
            child.terminate()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pmem.models.server", description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
