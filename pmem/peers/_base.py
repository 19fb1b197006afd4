"""What the peer arms share: the metering proxy the library is pointed at, a folder for its store, the
call of the (synchronous) library off the event loop, and how a history fails or does not run."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pmem.arms import NEEDS_A_MODEL, ArmBase
from pmem.models import HeuristicChatModel
from pmem.peers._proxy import REPLY_TOKENS, MeteringProxy

if TYPE_CHECKING:
    from pmem.arms import ModelSet

__all__ = ["LIBRARY_WAIT_S", "REPLY_TOKENS", "PeerArm", "PeerFailed", "PeerNotRunnable"]

#: how long a library's HTTP client waits for the proxy's answer. The proxy answers every request within
#: the model layer's limits (each call's ``timeout_s``, its retries, replica failover: what the sweep's
#: config sets), so this bound only catches a proxy that stopped answering. The openai SDK's default,
#: 600 s, gave up on a Mem0 extraction call that a one-thread llama.cpp replica was still writing, and
#: the SDK asked for it again, queued behind the abandoned call.
LIBRARY_WAIT_S = 6 * 3600.0


class PeerNotRunnable(RuntimeError):
    """The arm cannot run with these models or this install (the message, ``not run: ...``, says why)."""


class PeerFailed(RuntimeError):
    """The peer library raised, or a model call it made got no reply; the message says which."""


def _innermost(model: Any) -> Any:
    """The model under its recording and caching wrappers (each keeps it as ``inner``)."""
    while getattr(model, "inner", None) is not None:
        model = model.inner
    return model


def needs_a_model(models: ModelSet, library: str) -> None:
    """Refuse the deterministic heuristic agent: it reads our prompts' sections, not a library's prompts.
    (A sweep plans such an arm as not run; this guards an arm made by hand.)"""

    if isinstance(_innermost(models.agent), HeuristicChatModel):
        raise PeerNotRunnable(f"not run: {library} {NEEDS_A_MODEL}")


class PeerArm(ArmBase):
    """An arm that runs a peer library: its proxy, its folder, its calls and its end.

    Subclasses set :attr:`LIBRARY` and :attr:`EXTRA` and implement ``_ingest_units`` and ``read``."""

    LIBRARY = "peer"  # as failures and folders name it ("mem0")
    LABEL = "Peer"  # as people name it ("Mem0")
    EXTRA = ""  # the optional dependency set that installs it
    #: environment settings that keep the library's telemetry off (no call leaves 127.0.0.1), set before
    #: it is imported
    TELEMETRY_OFF: tuple[tuple[str, str], ...] = ()
    #: the library's loggers: quiet below CRITICAL, since what fails a history is in its row, and a sweep's
    #: output is its progress line (Mem0 and Graphiti log every retry and a notice per store)
    LOGGERS: tuple[str, ...] = ()
    #: ``reply_tokens``: the longest reply the library gets (default :data:`REPLY_TOKENS`, the ceiling of
    #: our own extraction call)
    OPTIONS = (*ArmBase.OPTIONS, "reply_tokens")

    def __init__(self, name: str, models: ModelSet, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(name, models, options)
        reply_tokens = self.options.get("reply_tokens", REPLY_TOKENS)
        if isinstance(reply_tokens, bool) or not isinstance(reply_tokens, int) or reply_tokens < 1:
            msg = (
                f"arm {name!r}: reply_tokens must be a positive whole number of tokens, got {reply_tokens!r}"
            )
            raise ValueError(msg)
        self.reply_tokens = reply_tokens  # the ceiling of every reply the library asks for
        # the library's only way out; its calls enter the write accounting as our write path's do
        self.proxy = MeteringProxy(
            models.agent, models.embedder, reply_tokens=reply_tokens, on_reply=self.count_call
        )
        self.folder = Path(tempfile.mkdtemp(prefix=f"pmem-{self.LIBRARY.lower()}-"))  # its store
        self.units = 0  # write units given to the library
        self._client: Any = None  # the library's memory object, once built (:meth:`client`)

    async def client(self) -> Any:
        """The library's memory, built at the first call: the model checked, the proxy listening, the
        embedding size probed; then :meth:`open`."""
        if self._client is None:
            needs_a_model(self.models, self.LABEL)
            self.quiet()
            for name, value in self.TELEMETRY_OFF:
                os.environ.setdefault(name, value)
            url = await self.proxy.start()
            dims = int((await self.embed(["dimension probe"])).shape[1])
            self._client = await self.open(url, dims)
        return self._client

    async def open(self, url: str, dims: int) -> Any:
        """Build the library's memory over the proxy at ``url`` (vectors of ``dims``); subclasses."""
        raise NotImplementedError

    def quiet(self) -> None:
        """Keep the library's logging off the sweep's output (its failures reach the history row)."""
        import logging

        for name in self.LOGGERS:
            logging.getLogger(name).setLevel(logging.CRITICAL)

    def openai_client(self, url: str, *, asynchronous: bool = False) -> Any:
        """An ``openai`` client for the library, pointed at the proxy at ``url``, that waits up to
        :data:`LIBRARY_WAIT_S`. It keeps the SDK's retries for a dropped connection; the proxy's error
        answers tell it not to retry (the model layer behind the proxy did)."""
        import openai  # the peer extras' dependency, not the light install's

        cls = openai.AsyncOpenAI if asynchronous else openai.OpenAI
        return cls(api_key="local", base_url=url, timeout=LIBRARY_WAIT_S)

    def missing(self, exc: ImportError) -> PeerNotRunnable:
        """The error for a library that is not installed."""
        msg = f"not run: arm {self.name!r} needs the {self.EXTRA!r} extra: pip install 'pmem[{self.EXTRA}]' ({exc})"
        return PeerNotRunnable(msg)

    async def call_library(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """A call of the synchronous library, in a thread: its HTTP requests reach the proxy, which runs
        on this event loop. Its exception, with the model layer's reason behind it, fails the history."""
        try:
            return await asyncio.to_thread(fn, *args, **kwargs)
        except Exception as exc:
            raise self.failed(exc, getattr(fn, "__name__", "call")) from exc

    def failed(self, exc: BaseException, what: str) -> PeerFailed:
        """The history's failure, on one line (a pydantic error spans several, its last one a URL)."""
        reason = self.proxy.failure
        said = " ".join(str(exc).split())[:600]
        msg = f"{self.LIBRARY} {what}: {type(exc).__name__}: {said}"
        return PeerFailed(f"{msg} (model call: {reason})" if reason else msg)

    def retained(self) -> bytes:
        """Everything the library holds for the history: the files of its store."""
        files = sorted(p for p in self.folder.rglob("*") if p.is_file())
        return b"".join(p.read_bytes() for p in files)

    def store_archive(self) -> bytes:
        """The library's store as one tar archive (the runner keeps it as the history's state, as it
        keeps a P-Mem graph): its files, in name order, with fixed times and owners, so the same store
        gives the same bytes."""
        import io
        import tarfile

        out = io.BytesIO()
        with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for path in sorted(p for p in self.folder.rglob("*") if p.is_file()):
                info = tarfile.TarInfo(path.relative_to(self.folder).as_posix())
                info.size = path.stat().st_size
                info.mtime, info.uid, info.gid, info.mode = 0, 0, 0, 0o644
                with path.open("rb") as f:
                    tar.addfile(info, f)
        return out.getvalue()

    def store_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.folder.rglob("*") if p.is_file())

    def extra(self) -> dict[str, Any]:
        out = super().extra()
        out["peer"] = {
            "library": self.LIBRARY,
            "proxy_requests": self.proxy.requests,
            "units": self.units,
            "store_bytes": self.store_bytes(),
        }
        return out

    async def aclose(self) -> None:
        """Stop the proxy and remove the history's folder (the runner calls this when the unit ends)."""
        await self.proxy.stop()
        shutil.rmtree(self.folder, ignore_errors=True)
