"""``pmem mcp --store DIR``: serve a store's memories over MCP (stdio, or ``--http`` on 127.0.0.1).

The memories' model comes from ``--config FILE.toml``, with the tables a sweep config uses:
``[models.agent]`` and ``[models.embedder]`` (absent: the heuristic agent and the hashing embedder),
``[memory]``: the write options ``pmem.Memory`` takes (``identity``, ``authority``, ...), and ``cache``:
a response cache file (a prompt asked before is answered from it).
"""

from __future__ import annotations

import asyncio
import socket
import sys
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pmem._lock import LockHeldError
from pmem.server._mcp import StaticTokens, build_server, serve_http
from pmem.server._store import MAX_OPEN, Store

if TYPE_CHECKING:
    import argparse

#: The HTTP transport's default address.
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--store", type=Path, required=True, metavar="DIR", help="the store directory (made when missing)"
    )
    parser.add_argument(
        "--http",
        action="store_true",
        help="serve streamable HTTP (bearer token from PMEM_MCP_TOKEN or PMEM_MCP_TOKENS)",
    )
    parser.add_argument("--host", default=DEFAULT_HOST, help=f"HTTP address (default {DEFAULT_HOST})")
    parser.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"HTTP port (default {DEFAULT_PORT}; 0: any free port)"
    )
    parser.add_argument(
        "--config", type=Path, metavar="FILE.toml", help="[models.agent], [models.embedder], [memory]"
    )
    parser.add_argument(
        "--max-open",
        type=int,
        default=MAX_OPEN,
        metavar="N",
        help=f"namespaces kept open at most; the least recently used beyond is closed (default {MAX_OPEN})",
    )


def read_config(path: Path | None) -> dict[str, Any]:
    """``model``, ``embedder`` and write options from a ``--config`` file (empty: the defaults).

    Raises:
        ValueError: the file is not TOML, or holds a table this command does not read.
    """
    if path is None:
        return {}
    try:
        config = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        msg = f"{path}: not TOML ({exc})"
        raise ValueError(msg) from None
    unknown = sorted(set(config) - {"models", "memory", "cache"})
    models = config.get("models", {})
    unknown += sorted(f"models.{name}" for name in set(models) - {"agent", "embedder"})
    if unknown:
        msg = f"{path}: unknown key(s) {unknown}; pmem mcp reads [models.agent], [models.embedder], [memory], cache"
        raise ValueError(msg)
    options = {"model": models.get("agent"), "embedder": models.get("embedder"), **config.get("memory", {})}
    if "cache" in config:
        options["cache"] = config["cache"]
    return options


def run(args: argparse.Namespace) -> int:
    try:
        options = read_config(args.config)
        tokens = StaticTokens.from_environment() if args.http else None
        store = Store.open(args.store, max_open=args.max_open, **options)
    except (ValueError, TypeError, LockHeldError, NotADirectoryError) as exc:
        print(f"pmem mcp: error: {exc}", file=sys.stderr)
        return 2
    try:
        if args.http:
            assert tokens is not None  # read above for --http
            sock = socket.create_server((args.host, args.port))  # port 0: any free port, printed below
            serve_http(
                store,
                sock,
                tokens,
                announce=lambda url: print(
                    f"pmem mcp: serving {args.store} on {url}", file=sys.stderr, flush=True
                ),
            )
        else:
            build_server(store).run("stdio")
    finally:
        asyncio.run(store.aclose())
    return 0
