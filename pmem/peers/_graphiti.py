"""The ``graphiti`` arm: Graphiti itself (``graphiti-core``, the ``graphiti`` extra), not our bitemporal
re-implementation of its design.

Each history gets its own Graphiti over an embedded Kuzu database in a folder of its own. Kuzu is the
embedded driver that installs here: Graphiti deprecates it upstream, and FalkorDB Lite, the other
embedded choice, needs Python >= 3.12 (this project supports 3.11). The LLM is ``OpenAIGenericClient``
and the embedder ``OpenAIEmbedder``, both pointed at the arm's :class:`~pmem.peers.MeteringProxy`
(its default ``json_schema`` mode: the proxy hands Graphiti's schema to the model layer, whose backend
asks its server for it in the server's own dialect: vLLM's structured outputs, llama.cpp's
``json_object`` with the schema, both constrained decoding); the reranker is pointed there too, though
the default search does not call it. Events enter through Graphiti's own ``add_episode`` (one write unit per episode, dated by the
event's time, else by its arrival order); a question reads Graphiti's own ``search`` (``top_k`` facts,
the arm's retrieval budget) and goes to the reader call every arm makes. Graphiti is asynchronous, so it
runs on the runner's event loop, as the proxy does.
"""

from __future__ import annotations

import warnings
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from pmem.memory.writepath import event_line
from pmem.peers._base import PeerArm
from pmem.peers._proxy import PEER_READ, PEER_WRITE

if TYPE_CHECKING:
    from pmem.arms import ReadResult
    from pmem.bench import Event, Question

#: the reference time of an event without its own: arrival order, one second apart from this instant
_EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


class GraphitiArm(PeerArm):
    """Graphiti behind the harness's models. Options: ``top_k`` (facts searched, 12), ``stream`` and
    ``chunk_chars`` (write units, as every arm), ``reply_tokens`` (its replies' ceiling: its edge
    replies restate facts of the episodes it is shown as context, past 2,048 tokens on 16-19 facts)."""

    LIBRARY = "graphiti"
    LABEL = "Graphiti"
    EXTRA = "graphiti"
    LOGGERS = ("graphiti_core",)
    TELEMETRY_OFF = (("GRAPHITI_TELEMETRY_ENABLED", "false"),)
    # Graphiti's group_id is left at the driver's default: one database per history already scopes it, and
    # Kuzu's driver (0.31) fails on a named group ('KuzuDriver' object has no attribute '_database')

    async def open(self, url: str, dims: int) -> Any:
        # graphiti-core warns at import (pydantic class-based config, the Kuzu driver's deprecation): not the
        # sweep's to print, and said once in this module's docstring
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            try:
                from graphiti_core import Graphiti
                from graphiti_core.cross_encoder.openai_reranker_client import OpenAIRerankerClient
                from graphiti_core.driver.driver import GraphProvider
                from graphiti_core.driver.kuzu_driver import KuzuDriver
                from graphiti_core.embedder.openai import OpenAIEmbedder, OpenAIEmbedderConfig
                from graphiti_core.graph_queries import get_fulltext_indices
                from graphiti_core.llm_client.config import LLMConfig
                from graphiti_core.llm_client.openai_generic_client import OpenAIGenericClient
            except ImportError as exc:
                raise self.missing(exc) from exc
        llm = LLMConfig(
            api_key="local",
            model="agent",
            small_model="agent",
            base_url=url,
            temperature=0.0,
            max_tokens=self.reply_tokens,
        )
        client = self.openai_client(url, asynchronous=True)  # one client: all its calls reach the proxy
        try:
            with warnings.catch_warnings():  # the deprecation is said once, in this module's docstring
                warnings.simplefilter("ignore", DeprecationWarning)
                driver = KuzuDriver(db=str(self.folder / "graph.kuzu"))
            graphiti = Graphiti(
                graph_driver=driver,
                llm_client=OpenAIGenericClient(config=llm, client=client, max_tokens=self.reply_tokens),
                embedder=OpenAIEmbedder(
                    OpenAIEmbedderConfig(
                        api_key="local", base_url=url, embedding_model="embedder", embedding_dim=dims
                    ),
                    client=client,
                ),
                cross_encoder=OpenAIRerankerClient(config=llm, client=client),
            )
            await graphiti.build_indices_and_constraints()
            await _full_text_indices(driver, get_fulltext_indices(GraphProvider.KUZU))
        except Exception as exc:
            raise self.failed(exc, "start") from exc
        return graphiti

    async def _ingest_units(self, units: list[list[Event]]) -> None:
        from graphiti_core.nodes import EpisodeType

        graphiti = await self.client()
        self.proxy.purpose = PEER_WRITE
        for unit in units:
            body = "\n".join(event_line(e) for e in unit)
            try:
                result = await graphiti.add_episode(
                    name=f"event {unit[0].index}",
                    episode_body=body,
                    source_description=unit[0].source or "history",
                    reference_time=_reference_time(unit[0]),
                    source=EpisodeType.text,
                )
            except Exception as exc:
                raise self.failed(exc, "add_episode") from exc
            self.units += 1
            for edge in getattr(result, "edges", []) or []:
                self.record("add", edge.name, edge.fact, True, event=unit[0].index)
            self.stats.facts += len(getattr(result, "edges", []) or [])
            self.stats.cells += len(getattr(result, "nodes", []) or [])

    async def read(self, question: Question) -> ReadResult:
        graphiti = await self.client()
        self.proxy.purpose = PEER_READ
        try:
            edges = await graphiti.search(question.text, num_results=self.top_k)
        except Exception as exc:
            raise self.failed(exc, "search") from exc
        return self.make_read([str(e.fact) for e in edges], [str(e.uuid) for e in edges])

    async def aclose(self) -> None:
        if self._client is not None:
            try:
                await self._client.close()  # Kuzu's connection, before the folder goes
            finally:
                self._client = None
        await super().aclose()


async def _full_text_indices(driver: Any, statements: list[str]) -> None:
    """Create the full-text indices Graphiti's Kuzu driver lists but never creates.

    Its ``build_indices_and_constraints`` is a no-op on Kuzu (graphiti-core 0.31; getzep/graphiti#1112,
    #1258), so the first search of an episode's edges fails ("Table RelatesToNode_ doesn't have an index
    with name edge_name_and_fact"). The statements are the library's own (``get_fulltext_indices``); one
    that already exists (a version that creates them) is left alone, as Kuzu has no ``IF NOT EXISTS`` here.
    """
    rows, _, _ = await driver.execute_query("CALL SHOW_INDEXES() RETURN *;")
    existing = {str(r.get("index_name")) for r in rows or []}
    for statement in statements:
        name = statement.split("'")[3]  # CALL CREATE_FTS_INDEX('Table', 'name', [...])
        if name not in existing:
            await driver.execute_query(statement)


def _reference_time(e: Event) -> datetime:
    """When the episode happened: the event's own time when it parses, else its arrival order."""
    if e.time:
        try:
            when = datetime.fromisoformat(str(e.time))
        except ValueError:
            pass
        else:
            return when if when.tzinfo else when.replace(tzinfo=UTC)
    return _EPOCH + timedelta(seconds=e.index)
