"""The memory's tools as one table: each tool's name, what its caller's model reads, its arguments with
their descriptions, whether it reads, writes or destroys, the checks of its arguments and the call it makes
on a namespace's memory with the reply built from the answer. The MCP registration
(:mod:`pmem.server._mcp`), the in-process calls (:class:`pmem.server.MemoryTools`) and the test client read
this table; a new tool is one :class:`Tool` here and the reply builder it names.

>>> [t.name for t in TOOLS][:3]
['add', 'recall', 'search']
>>> [p.name for p in TOOLS_BY_NAME["undo"].signature.parameters.values()]
['user_id', 'op_seq', 'agent_id', 'run_id']
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from pmem.graph import DISCLOSURES
from pmem.memory import RECALL_TOKENS
from pmem.server._replies import (
    add_reply,
    as_of_reply,
    cell_reply,
    cells_reply,
    op_reply,
    recall_reply,
    receipt_reply,
    search_reply,
    version_reply,
    why_reply,
)

#: The most cells one ``as_of`` reply lists (a whole past frontier can be large).
AS_OF_LIMIT = 500
#: The most hits one ``search`` returns.
SEARCH_LIMIT = 100
#: The largest budget (tokens) one ``recall`` fills.
RECALL_LIMIT = 32_000

#: What a tool does to its namespace: reads change nothing; erase removes for good.
Effect = Literal["read", "write", "destroy"]
_REQUIRED = inspect.Parameter.empty


class ToolCallError(ValueError):
    """A call the tools refuse or cannot carry out; the message says why, in one line."""


@dataclass(frozen=True)
class Arg:
    """One argument of a tool: its name, type, the description the client's model reads, and its
    default (none: required)."""

    name: str
    annotation: Any
    description: str
    default: Any = _REQUIRED

    @property
    def required(self) -> bool:
        return self.default is _REQUIRED


#: The namespace every call names: ``user_id`` first, the narrower ids after the tool's required args.
USER_ID = Arg("user_id", str, "whose memory: 1-128 of A-Z a-z 0-9 . _ @ + -")
NARROWER_IDS = (
    Arg("agent_id", str | None, "an agent's own memory within the user's (optional)", None),
    Arg("run_id", str | None, "one run's memory within the user's (optional)", None),
)
_KEY = Arg("key", str, "a fact's key, as search or add returned it (e.g. alice.city)")


def _no_check(**args: Any) -> None:
    """Every value the schema admits is a valid call."""


@dataclass(frozen=True)
class Tool:
    """One tool of the table.

    Attributes:
        name: the tool's name, as clients list it.
        summary: what the client's model reads of it.
        effect: read, write or destroy (a write is durable when it returns).
        args: its own arguments (the namespace's are added around them: :attr:`arguments`, :attr:`signature`).
        returns: the reply's type (the SDK derives the output schema from it).
        run: ``await run(memory, **args)``: the call on the namespace's memory and its JSON reply.
        check: raises :class:`ToolCallError` for arguments the tool refuses before any memory is opened.
    """

    name: str
    summary: str
    effect: Effect
    args: tuple[Arg, ...]
    returns: Any
    run: Callable[..., Awaitable[Any]]
    check: Callable[..., None] = _no_check
    #: every argument, the namespace's included, in call order (made once from ``args``)
    arguments: tuple[Arg, ...] = field(init=False, repr=False, compare=False)
    signature: inspect.Signature = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        ordered = (
            USER_ID,
            *(a for a in self.args if a.required),
            *NARROWER_IDS,
            *(a for a in self.args if not a.required),
        )
        params = [
            inspect.Parameter(
                a.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=a.default, annotation=a.annotation
            )
            for a in ordered
        ]
        object.__setattr__(self, "arguments", ordered)
        object.__setattr__(self, "signature", inspect.Signature(params, return_annotation=self.returns))

    @property
    def writes(self) -> bool:
        return self.effect != "read"


def _check_search(query: str, k: int, disclose: Any) -> None:
    if not 1 <= k <= SEARCH_LIMIT:
        msg = f"search: k must be 1 to {SEARCH_LIMIT}, got {k}"
        raise ToolCallError(msg)
    unknown = sorted(set(disclose) - set(DISCLOSURES))
    if unknown:
        msg = f"search: disclose {unknown} unknown; one of {', '.join(DISCLOSURES)}"
        raise ToolCallError(msg)


def _check_recall(query: str, budget: Any) -> None:
    if isinstance(budget, bool) or not isinstance(budget, int) or not 1 <= budget <= RECALL_LIMIT:
        msg = f"recall: budget must be 1 to {RECALL_LIMIT} tokens, got {budget!r}"
        raise ToolCallError(msg)


def _check_as_of(seq: int | None, time: str | None, key: str | None, limit: int) -> None:
    if seq is None and time is None:
        msg = "as_of: give seq (an arrival number) or time (ISO 8601), or both"
        raise ToolCallError(msg)
    if not 1 <= limit <= AS_OF_LIMIT:
        msg = f"as_of: limit must be 1 to {AS_OF_LIMIT}, got {limit}"
        raise ToolCallError(msg)


async def _add(m: Any, text: str, source: str, time: str | None, valid_time: str | None) -> dict[str, Any]:
    return add_reply(await m.add(text, source=source, time=time, valid_time=valid_time))


async def _search(m: Any, query: str, k: int, disclose: Any) -> list[dict[str, Any] | None]:
    cells = await m.search(query, k, disclose=tuple(disclose))
    return search_reply(cells, [await m.why(c.key) for c in cells])


async def _recall(m: Any, query: str, budget: int) -> dict[str, Any]:
    return recall_reply(await m.recall(query, budget))


async def _get(m: Any, key: str) -> dict[str, Any] | None:
    return cell_reply(await m.get(key))


async def _history(m: Any, key: str) -> list[dict[str, Any]]:
    return [version_reply(v) for v in await m.history(key)]


async def _as_of(m: Any, seq: int | None, time: str | None, key: str | None, limit: int) -> dict[str, Any]:
    return as_of_reply(await m.as_of(seq, time=time), key, limit)


async def _why(m: Any, key: str) -> dict[str, Any] | None:
    return why_reply(await m.why(key))


async def _undo(m: Any, op_seq: int) -> dict[str, Any]:
    return op_reply(await m.undo(op_seq))


async def _erase(m: Any, evidence_id: str) -> dict[str, Any]:
    return receipt_reply(await m.erase(evidence_id))


async def _conflicts(m: Any) -> list[dict[str, Any] | None]:
    return cells_reply(await m.conflicts())


async def _resolve(m: Any, key: str, value: str, source: str, note: str | None) -> dict[str, Any]:
    return op_reply(await m.resolve(key, value, source=source, note=note))


#: Every tool, in the order clients list them.
TOOLS: tuple[Tool, ...] = (
    Tool(
        "add",
        "Remember what a text states. The memory extracts its facts, makes each the current value of its key "
        "and keeps what it displaced. Returns the evidence id of the text, the facts extracted and every "
        "operation applied (and why any was not). Durable when it returns.",
        "write",
        (
            Arg("text", str, "what was said or observed, in plain words"),
            Arg("source", str, "who said it (source authority ranks it)", "user"),
            Arg("time", str | None, "when it was observed (ISO 8601)", None),
            Arg("valid_time", str | None, "when it became true (ISO 8601)", None),
        ),
        dict[str, Any],
        _add,
    ),
    Tool(
        "recall",
        "The context to answer a question from, within a token budget: the current facts (each with its "
        "status, the turn it comes from and that turn's date) and the turns of what was said (dated, with "
        "their speaker), best first. Put `context` in your prompt; `items` lists each line with the "
        "evidence it cites.",
        "read",
        (
            Arg("query", str, "the question to answer, or a topic"),
            Arg("budget", int, f"the most tokens the context may take (1-{RECALL_LIMIT})", RECALL_TOKENS),
        ),
        dict[str, Any],
        _recall,
        _check_recall,
    ),
    Tool(
        "search",
        "The current values nearest a query, best first, each with its key, value, status, score and the "
        "evidence it comes from (the turn's text, who said it and when). Use it before answering from "
        "memory; `recall` gives a whole context within a token budget.",
        "read",
        (
            Arg("query", str, "a question or topic"),
            Arg("k", int, f"the most hits to return (1-{SEARCH_LIMIT})", 12),
            # the SDK reads the default into the schema; it is never mutated
            Arg(
                "disclose",
                list[str],
                "add 'alternatives' (open claims) and/or 'history' (earlier values)",
                [],
            ),
        ),
        list[dict[str, Any] | None],
        _search,
        _check_search,
    ),
    Tool(
        "get",
        "The current value of one key, its status (active, contested, empty), open alternatives and "
        "earlier values; null when the memory never held the key.",
        "read",
        (_KEY,),
        dict[str, Any] | None,
        _get,
    ),
    Tool(
        "history",
        "Every value a key has held, in arrival order, each with its status (active, superseded, "
        "contradicted, revoked, ...), the arrivals it was valid between and the evidence that stated it.",
        "read",
        (_KEY,),
        list[dict[str, Any]],
        _history,
    ),
    Tool(
        "as_of",
        "What the memory held after arrival seq (or observation time): for audits and for answering about "
        "the past.",
        "read",
        (
            Arg("seq", int | None, "the arrival number to look back to", None),
            Arg("time", str | None, "the observation time to look back to (ISO 8601)", None),
            Arg("key", str | None, "one key only (else the whole memory)", None),
            Arg("limit", int, f"the most cells to list (1-{AS_OF_LIMIT})", 100),
        ),
        dict[str, Any],
        _as_of,
        _check_as_of,
    ),
    Tool(
        "why",
        "Why a key holds its value: the evidence behind it (texts, sources, times) and every operation on "
        "the key. Null when the memory never held the key.",
        "read",
        (_KEY,),
        dict[str, Any] | None,
        _why,
    ),
    Tool(
        "undo",
        "Undo one operation: its key becomes what it would be had the operation never happened (later "
        "operations are kept). Returns whether it applied, and why not.",
        "write",
        (Arg("op_seq", int, "the seq of the operation to undo (from why or history)"),),
        dict[str, Any],
        _undo,
    ),
    Tool(
        "erase",
        "Erase a text the user wants forgotten: it leaves the memory and the disk, and every value that "
        "rested on it alone goes with it. Returns the receipt: the keys whose value changed and the "
        "versions erased (never the erased text).",
        "destroy",
        (Arg("evidence_id", str, "the evidence to erase (e.g. e3, from add or why)"),),
        dict[str, Any],
        _erase,
    ),
    Tool(
        "conflicts",
        "The open conflicts: keys whose value is contested, each with the competing values.",
        "read",
        (),
        list[dict[str, Any] | None],
        _conflicts,
    ),
    Tool(
        "resolve",
        "Settle a conflict: the value given becomes current and its competitors are contradicted. Returns "
        "whether it applied, and why not.",
        "write",
        (
            _KEY,
            Arg("value", str, "the value that wins: the current one or an alternative"),
            Arg("source", str, "who settles it", "user"),
            Arg("note", str | None, "the words that settle it, kept as evidence", None),
        ),
        dict[str, Any],
        _resolve,
    ),
)

#: The table by tool name.
TOOLS_BY_NAME: dict[str, Tool] = {t.name: t for t in TOOLS}
