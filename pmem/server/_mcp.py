"""``pmem mcp``: the memory's tools served over the Model Context Protocol, with the official SDK.

Over stdio (the default: an MCP client starts the server as its child), every namespace is the client's.
Over streamable HTTP (``--http``, 127.0.0.1 unless told otherwise), every request carries a bearer token
from the server's environment, never from its command line:

- ``PMEM_MCP_TOKEN``: a token that reaches every namespace;
- ``PMEM_MCP_TOKENS``: a JSON object of tokens, each with the users it may reach
  (``{"tok-a": ["alice"], "tok-ops": ["*"]}``: ``"*"`` is every user).

A request without a known token gets HTTP 401; a tool call for a user the token may not reach is refused
in one line, as every bad call is (an MCP error result naming the argument).
"""

# No ``from __future__ import annotations`` here: the SDK reads the tools' annotations, which name types
# made inside _register (pydantic comes with the ``mcp`` extra, so it is imported there).
import hmac
import json
import os
import socket
from collections.abc import Mapping
from typing import Annotated, Any

from pmem.models import MissingDependencyError
from pmem.server._namespace import Namespace
from pmem.server._store import Store
from pmem.server._tools import MemoryTools, ToolCallError

#: The environment variables that hold the HTTP transport's tokens.
TOKEN_ENV = "PMEM_MCP_TOKEN"
TOKENS_ENV = "PMEM_MCP_TOKENS"
#: The server's name, as clients list it.
SERVER_NAME = "pmem"
#: Every user (a token's reach in ``PMEM_MCP_TOKENS``).
ANY_USER = "*"

_INSTRUCTIONS = (
    "P-Mem: a memory that keeps the current value of each fact and everything it displaced. Call add with "
    "what the user said or what you observed; recall for the context to answer from (the facts, each with "
    "the turn and date it comes from, and the turns themselves), search or get to read current values; "
    "history, as_of and "
    "why to see how a value came to be; undo, erase, conflicts and resolve to correct it. Every call names "
    "user_id (and agent_id or run_id for a narrower memory); namespaces never see each other."
)


def _import_mcp() -> Any:
    try:
        from mcp.server.mcpserver import MCPServer
    except ImportError:
        msg = "pmem mcp needs the MCP SDK: pip install 'pmem[mcp]'"
        raise MissingDependencyError(msg) from None
    return MCPServer


class StaticTokens:
    """The HTTP transport's token verifier (the SDK's ``TokenVerifier`` protocol): tokens from the
    environment, each reaching a set of users (None: all)."""

    def __init__(self, tokens: Mapping[str, frozenset[str] | None]) -> None:
        self._tokens = dict(tokens)  # token -> the users it reaches (None: every user)

    @classmethod
    def from_environment(cls, env: Mapping[str, str] = os.environ) -> "StaticTokens":
        """The tokens of ``PMEM_MCP_TOKEN`` and ``PMEM_MCP_TOKENS``.

        Raises:
            ValueError: neither is set, or ``PMEM_MCP_TOKENS`` is not a JSON object of lists of users.
        """
        tokens: dict[str, frozenset[str] | None] = {}
        if env.get(TOKEN_ENV):
            tokens[env[TOKEN_ENV]] = None
        if env.get(TOKENS_ENV):
            try:
                table = json.loads(env[TOKENS_ENV])
            except ValueError as exc:
                msg = f"{TOKENS_ENV}: not JSON ({exc})"
                raise ValueError(msg) from None
            if not isinstance(table, dict) or not all(
                isinstance(t, str) and t and isinstance(u, list) and all(isinstance(x, str) for x in u)
                for t, u in table.items()
            ):
                msg = f'{TOKENS_ENV}: a JSON object of token -> list of user ids, e.g. {{"tok-a": ["alice"]}}'
                raise ValueError(msg)
            for token, users in table.items():
                tokens[token] = None if ANY_USER in users else frozenset(users)
        if not tokens:
            msg = f"the HTTP transport needs a bearer token: set {TOKEN_ENV} (or {TOKENS_ENV}) in the environment"
            raise ValueError(msg)
        return cls(tokens)

    async def verify_token(self, token: str) -> Any:
        from mcp.server.auth.provider import AccessToken

        for known, users in self._tokens.items():
            if hmac.compare_digest(known.encode(), token.encode()):
                claims = {"users": None if users is None else sorted(users)}
                return AccessToken(token=token, client_id="pmem", scopes=[], claims=claims)
        return None


def _token_access(namespace: Namespace) -> bool:
    """Whether the current request's token reaches ``namespace`` (no token: stdio, every namespace)."""
    from mcp.server.auth.middleware.auth_context import get_access_token

    token = get_access_token()
    if token is None:
        return True
    users = (token.claims or {}).get("users")
    return users is None or namespace.user_id in users


def build_server(store: Store, *, http_url: str | None = None, tokens: StaticTokens | None = None) -> Any:
    """The MCP server of ``store``'s memories (an ``mcp.server.mcpserver.MCPServer``).

    Args:
        store: the namespaces.
        http_url: the server's HTTP address (``http://127.0.0.1:8765``), when served over HTTP.
        tokens: the bearer tokens the HTTP transport accepts (required with ``http_url``).
    """
    mcp_server = _import_mcp()
    auth: dict[str, Any] = {}
    if http_url is not None:
        from mcp.server.auth.settings import AuthSettings
        from pydantic import AnyHttpUrl

        if tokens is None:
            msg = "build_server: an HTTP server needs its tokens"
            raise ValueError(msg)
        auth = {
            "token_verifier": tokens,
            # the tokens are our own, not an authorization server's: there is no audience to check
            "auth": AuthSettings(
                issuer_url=AnyHttpUrl(http_url),
                resource_server_url=AnyHttpUrl(f"{http_url}/mcp"),
                validate_token_resource=False,
            ),
        }
    server = mcp_server(SERVER_NAME, instructions=_INSTRUCTIONS, **auth)
    _register(server, MemoryTools(store, _token_access))
    return server


def serve_http(store: Store, sock: socket.socket, tokens: StaticTokens, *, announce: Any = None) -> None:
    """Serve ``store`` over streamable HTTP on the bound socket ``sock`` (at ``/mcp``) until stopped
    (Ctrl-C, SIGTERM). ``announce`` is called with the endpoint's URL once the server is made."""
    import uvicorn  # the MCP SDK's own HTTP server

    host, port = sock.getsockname()[:2]
    url = f"http://{host}:{port}"
    app = build_server(store, http_url=url, tokens=tokens).streamable_http_app(host=host)
    if announce is not None:
        announce(f"{url}/mcp")
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])


def _register(server: Any, tools: MemoryTools) -> None:
    """The ten tools, each a thin wrapper whose docstring and argument descriptions the client's model
    reads; a refused call raises the SDK's ``ToolError`` (an error result with the one-line reason)."""
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp.types import ToolAnnotations
    from pydantic import Field

    # what a client may assume of each tool: reads change nothing; erase removes for good
    read = ToolAnnotations(
        read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
    )
    write = ToolAnnotations(
        read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False
    )
    destroy = ToolAnnotations(
        read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False
    )

    UserId = Annotated[str, Field(description="whose memory: 1-128 of A-Z a-z 0-9 . _ @ + -")]
    AgentId = Annotated[str | None, Field(description="an agent's own memory within the user's (optional)")]
    RunId = Annotated[str | None, Field(description="one run's memory within the user's (optional)")]
    Key = Annotated[str, Field(description="a fact's key, as search or add returned it (e.g. alice.city)")]

    async def run(call: Any) -> Any:
        try:
            return await call
        except ToolCallError as exc:
            raise ToolError(str(exc)) from None

    @server.tool(annotations=write)
    async def add(
        user_id: UserId,
        text: Annotated[str, Field(description="what was said or observed, in plain words")],
        agent_id: AgentId = None,
        run_id: RunId = None,
        source: Annotated[str, Field(description="who said it (source authority ranks it)")] = "user",
        time: Annotated[str | None, Field(description="when it was observed (ISO 8601)")] = None,
        valid_time: Annotated[str | None, Field(description="when it became true (ISO 8601)")] = None,
    ) -> dict[str, Any]:
        """Remember what a text states. The memory extracts its facts, makes each the current value of
        its key and keeps what it displaced. Returns the evidence id of the text, the facts extracted
        and every operation applied (and why any was not). Durable when it returns."""
        reply: dict[str, Any] = await run(
            tools.add(user_id, text, agent_id, run_id, source, time, valid_time)
        )
        return reply

    @server.tool(annotations=read)
    async def search(
        user_id: UserId,
        query: Annotated[str, Field(description="a question or topic")],
        agent_id: AgentId = None,
        run_id: RunId = None,
        k: Annotated[int, Field(description="the most hits to return (1-100)")] = 12,
        disclose: Annotated[
            list[str], Field(description="add 'alternatives' (open claims) and/or 'history' (earlier values)")
        ] = [],  # noqa: B006 - the SDK reads the default into the schema; it is never mutated
    ) -> list[dict[str, Any] | None]:
        """The current values nearest a query, best first, each with its key, value, status, score and
        the evidence it comes from (the turn's text, who said it and when). Use it before answering from
        memory; `recall` gives a whole context within a token budget."""
        reply: list[dict[str, Any] | None] = await run(
            tools.search(user_id, query, agent_id, run_id, k, disclose)
        )
        return reply

    @server.tool(annotations=read)
    async def recall(
        user_id: UserId,
        query: Annotated[str, Field(description="the question to answer, or a topic")],
        agent_id: AgentId = None,
        run_id: RunId = None,
        budget: Annotated[int, Field(description="the most tokens the context may take (1-32000)")] = 1000,
    ) -> dict[str, Any]:
        """The context to answer a question from, within a token budget: the current facts (each with
        its status, the turn it comes from and that turn's date) and the turns of what was said (dated,
        with their speaker), best first. Put `context` in your prompt; `items` lists each line with the
        evidence it cites."""
        reply: dict[str, Any] = await run(tools.recall(user_id, query, agent_id, run_id, budget))
        return reply

    @server.tool(annotations=read)
    async def get(
        user_id: UserId, key: Key, agent_id: AgentId = None, run_id: RunId = None
    ) -> dict[str, Any] | None:
        """The current value of one key, its status (active, contested, empty), open alternatives and
        earlier values; null when the memory never held the key."""
        reply: dict[str, Any] | None = await run(tools.get(user_id, key, agent_id, run_id))
        return reply

    @server.tool(annotations=read)
    async def history(
        user_id: UserId, key: Key, agent_id: AgentId = None, run_id: RunId = None
    ) -> list[dict[str, Any]]:
        """Every value a key has held, in arrival order, each with its status (active, superseded,
        contradicted, revoked, ...), the arrivals it was valid between and the evidence that stated it."""
        reply: list[dict[str, Any]] = await run(tools.history(user_id, key, agent_id, run_id))
        return reply

    @server.tool(annotations=read)
    async def as_of(
        user_id: UserId,
        agent_id: AgentId = None,
        run_id: RunId = None,
        seq: Annotated[int | None, Field(description="the arrival number to look back to")] = None,
        time: Annotated[
            str | None, Field(description="the observation time to look back to (ISO 8601)")
        ] = None,
        key: Annotated[str | None, Field(description="one key only (else the whole memory)")] = None,
        limit: Annotated[int, Field(description="the most cells to list (1-500)")] = 100,
    ) -> dict[str, Any]:
        """What the memory held after arrival seq (or observation time): for audits and for answering
        about the past."""
        reply: dict[str, Any] = await run(tools.as_of(user_id, agent_id, run_id, seq, time, key, limit))
        return reply

    @server.tool(annotations=read)
    async def why(
        user_id: UserId, key: Key, agent_id: AgentId = None, run_id: RunId = None
    ) -> dict[str, Any] | None:
        """Why a key holds its value: the evidence behind it (texts, sources, times) and every operation
        on the key. Null when the memory never held the key."""
        reply: dict[str, Any] | None = await run(tools.why(user_id, key, agent_id, run_id))
        return reply

    @server.tool(annotations=write)
    async def undo(
        user_id: UserId,
        op_seq: Annotated[int, Field(description="the seq of the operation to undo (from why or history)")],
        agent_id: AgentId = None,
        run_id: RunId = None,
    ) -> dict[str, Any]:
        """Undo one operation: its key becomes what it would be had the operation never happened (later
        operations are kept). Returns whether it applied, and why not."""
        reply: dict[str, Any] = await run(tools.undo(user_id, op_seq, agent_id, run_id))
        return reply

    @server.tool(annotations=destroy)
    async def erase(
        user_id: UserId,
        evidence_id: Annotated[str, Field(description="the evidence to erase (e.g. e3, from add or why)")],
        agent_id: AgentId = None,
        run_id: RunId = None,
    ) -> dict[str, Any]:
        """Erase a text the user wants forgotten: it leaves the memory and the disk, and every value that
        rested on it alone goes with it. Returns the receipt: the keys whose value changed and the
        versions erased (never the erased text)."""
        reply: dict[str, Any] = await run(tools.erase(user_id, evidence_id, agent_id, run_id))
        return reply

    @server.tool(annotations=read)
    async def conflicts(
        user_id: UserId, agent_id: AgentId = None, run_id: RunId = None
    ) -> list[dict[str, Any] | None]:
        """The open conflicts: keys whose value is contested, each with the competing values."""
        reply: list[dict[str, Any] | None] = await run(tools.conflicts(user_id, agent_id, run_id))
        return reply

    @server.tool(annotations=write)
    async def resolve(
        user_id: UserId,
        key: Key,
        value: Annotated[str, Field(description="the value that wins: the current one or an alternative")],
        agent_id: AgentId = None,
        run_id: RunId = None,
        source: Annotated[str, Field(description="who settles it")] = "user",
        note: Annotated[str | None, Field(description="the words that settle it, kept as evidence")] = None,
    ) -> dict[str, Any]:
        """Settle a conflict: the value given becomes current and its competitors are contradicted.
        Returns whether it applied, and why not."""
        reply: dict[str, Any] = await run(tools.resolve(user_id, key, value, agent_id, run_id, source, note))
        return reply
