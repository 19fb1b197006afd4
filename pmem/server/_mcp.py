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

# No ``from __future__ import annotations`` here: the SDK reads the tools' signatures, whose annotations
# are made inside _tool_function (pydantic comes with the ``mcp`` extra, so it is imported there).
import hmac
import inspect
import json
import os
import socket
from collections.abc import Mapping
from typing import Annotated, Any

from pmem.models import MissingDependencyError
from pmem.server._namespace import Namespace
from pmem.server._store import Store
from pmem.server._table import TOOLS, Tool, ToolCallError
from pmem.server._tools import MemoryTools

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
    """Every tool of the table (:data:`pmem.server._table.TOOLS`), each a thin function whose signature,
    docstring and argument descriptions the SDK turns into the schema the client's model reads; a refused
    call raises the SDK's ``ToolError`` (an error result with the one-line reason)."""
    from mcp.types import ToolAnnotations

    # what a client may assume of each tool: reads change nothing; erase removes for good
    hints = {
        "read": ToolAnnotations(
            read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
        ),
        "write": ToolAnnotations(
            read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False
        ),
        "destroy": ToolAnnotations(
            read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False
        ),
    }
    for tool in TOOLS:
        server.add_tool(_tool_function(tool, tools), name=tool.name, annotations=hints[tool.effect])


def _tool_function(tool: Tool, tools: MemoryTools) -> Any:
    """``tool`` as the SDK registers a function: its arguments annotated with their descriptions."""
    from mcp.server.mcpserver.exceptions import ToolError
    from pydantic import Field

    async def call(**arguments: Any) -> Any:
        try:
            return await tools.call(tool.name, **arguments)
        except ToolCallError as exc:
            raise ToolError(str(exc)) from None

    params = [
        inspect.Parameter(
            arg.name,
            inspect.Parameter.KEYWORD_ONLY,
            default=arg.default,
            annotation=Annotated[arg.annotation, Field(description=arg.description)],
        )
        for arg in tool.arguments
    ]
    call.__signature__ = inspect.Signature(params, return_annotation=tool.returns)  # type: ignore[attr-defined]
    call.__name__ = call.__qualname__ = tool.name
    call.__doc__ = tool.summary
    return call
