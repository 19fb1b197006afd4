"""What an ingest reports (counts, model use, where the time went), and its progress line."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

import pyarrow as pa
import pyarrow.compute as pc

from pmem.ingest._stream import row_word
from pmem.ingest._workdir import workdir_of
from pmem.memory.writepath import no_fact_reason

#: The driver-side stages whose wall time the report gives (extract and commit: waiting on workers;
#: build: the finished output, a sharded state's parts built by the workers).
STAGES = ("read", "extract", "route", "commit", "merge", "checkpoint", "build")
#: The report's counters a resumed ingest goes on from (the checkpoint's report holds them).
COUNTERS = ("events", "rejects", "facts", "fact_rows", "refused", "no_fact_rows")


@dataclass
class IngestReport:
    """What an ingest did: counts, model use, and where the time went."""

    stream: str
    out: str
    partitions: int
    events: int = 0
    rejects: int = 0
    facts: int = 0  # extracted facts and fact rows
    fact_rows: int = 0  # rows that were facts already: no extraction
    refused: int = 0
    #: text rows whose extraction gave no fact (kept as evidence, nothing written), and the first few
    no_fact_rows: int = 0
    no_fact_examples: list[dict[str, Any]] = field(default_factory=list)
    graph: dict[str, int] = field(default_factory=dict)
    calls: dict[str, dict[str, int]] = field(default_factory=dict)
    stage_s: dict[str, float] = field(default_factory=lambda: dict.fromkeys(STAGES, 0.0))
    wall_s: float = 0.0
    resumed_from: int = 0
    attempts: int = 1
    state_bytes: int = 0
    state_sha256: str = ""
    #: peak resident memory (MiB) of the driver and of each worker, this attempt
    peak_rss_mb: dict[str, float] = field(default_factory=dict)
    spec: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def go_on_from(self, saved: dict[str, Any]) -> None:
        """Take the counters of ``saved`` (the report as a checkpoint holds it): a resumed ingest's
        report counts every row, not only this attempt's."""
        for name in COUNTERS:
            setattr(self, name, int(saved.get(name, 0)))
        self.no_fact_examples = list(saved.get("no_fact_examples", []))
        self.calls = {purpose: dict(c) for purpose, c in saved["calls"].items()}
        self.resumed_from = self.events

    def count_calls(self, requests: pa.Table) -> None:
        """Add the model layer's request rows (REQUEST_SCHEMA) to the calls and tokens by purpose."""
        if not requests.num_rows:
            return
        counted = requests.select(["purpose", "cached", "prompt_tokens", "completion_tokens"])
        counted = counted.set_column(1, "cached", pc.cast(counted.column("cached"), pa.int64()))
        sums = counted.group_by("purpose").aggregate(
            [
                ("purpose", "count"),
                ("cached", "sum"),
                ("prompt_tokens", "sum"),
                ("completion_tokens", "sum"),
            ]
        )
        for row in sums.to_pylist():
            c = self.calls.setdefault(
                row["purpose"], {"calls": 0, "cached": 0, "prompt_tokens": 0, "completion_tokens": 0}
            )
            c["calls"] += int(row["purpose_count"])
            for name in ("cached", "prompt_tokens", "completion_tokens"):
                c[name] += int(row[f"{name}_sum"] or 0)
        self.calls = dict(sorted(self.calls.items()))

    def lines(self) -> list[str]:
        """The report as a person reads it."""
        ops = {k[3:]: v for k, v in self.graph.items() if k.startswith("op_") and v}
        calls = sum(c["calls"] for c in self.calls.values())
        cached = sum(c["cached"] for c in self.calls.values())
        tokens = sum(c["prompt_tokens"] + c["completion_tokens"] for c in self.calls.values())
        rate = self.events / self.wall_s if self.wall_s else 0.0
        out = [
            f"ingested {self.events:,} events ({self.rejects:,} rejected) into {self.out} "
            f"({self.state_bytes:,} bytes) with {self.partitions} partition(s) in {self.wall_s:.1f} s "
            f"({rate:,.0f} events/s)",
            f"facts {self.facts:,} ({self.fact_rows:,} fact rows); keys {self.graph.get('keys', 0):,}; "
            f"cells {self.graph.get('cells', 0):,}; "
            f"operations {self.graph.get('operations', 0):,} "
            f"({', '.join(f'{k} {v:,}' for k, v in ops.items()) or 'none'}); refused writes {self.refused:,}",
            f"model calls {calls:,} ({cached:,} from the cache), tokens {tokens:,}: "
            + ", ".join(f"{p} {c['calls']:,}" for p, c in sorted(self.calls.items())),
            "driver wall time by stage: " + ", ".join(f"{k} {v:.1f} s" for k, v in self.stage_s.items()),
        ]
        if self.no_fact_rows:
            out.insert(2, self.no_fact_line())
        if self.peak_rss_mb:
            out.append(
                "peak memory (MiB): " + ", ".join(f"{k} {v:,.0f}" for k, v in self.peak_rss_mb.items())
            )
        if self.resumed_from:
            out.append(f"resumed from event {self.resumed_from:,} (attempt {self.attempts})")
        return out

    def no_fact_line(self) -> str:
        """How many text rows gave no fact, the first few quoted, and why (what the agent reads).

        >>> r = IngestReport("s.jsonl", "s.arrow", 1, events=3, no_fact_rows=1, spec={"agent": {"backend": "x"}})
        >>> r.no_fact_examples.append({"row": 2, "text": "Bob left.", "reason": None})
        >>> print(r.no_fact_line())
        text rows that gave no fact: 1 of 3 (line 2 "Bob left."): the agent's replies held no fact (see ...)
        """

        word = row_word(Path(self.stream))
        quoted = "; ".join(
            f"{word} {e['row']} {json.dumps(e['text'], ensure_ascii=False)}"
            + (f" ({e['reason']})" if e.get("reason") else "")
            for e in self.no_fact_examples
        )
        more = "; ..." if self.no_fact_rows > len(self.no_fact_examples) else ""
        backend = str(self.spec.get("agent", {}).get("backend", ""))
        why = no_fact_reason(backend, f"{workdir_of(Path(self.out)) / 'requests'}/")
        text_rows = self.events - self.fact_rows
        return f"text rows that gave no fact: {self.no_fact_rows:,} of {text_rows:,} ({quoted}{more}): {why}"


def nothing_ingested(report: IngestReport, agent_backend: str) -> str | None:
    """Why an ingest of a non-empty stream holds no fact (None when it holds some, or the stream was
    empty): every row rejected, or the agent extracted nothing (the default agent reads only the
    benchmarks' sentence templates).

    >>> nothing_ingested(IngestReport("s.jsonl", "s.arrow", 1, events=3, facts=0), "heuristic")[:40]
    'extracted no fact from 3 events: the def'
    """
    if report.facts:
        return None
    if report.events == 0 and report.rejects:
        return f"every row of the stream was rejected ({report.rejects:,}; see {workdir_of(Path(report.out)) / 'rejects'})"
    if report.events == 0:
        return None

    why = no_fact_reason(agent_backend, "the state's .ingest/requests/")
    return f"extracted no fact from {report.events:,} events: {why}"


class Progress:
    """A tqdm bar (events, events/s, facts/s, ETA) on a terminal; a line every ``interval`` s otherwise."""

    def __init__(
        self, total: int | None, initial: int, enabled: bool, stream: TextIO, interval: float = 10.0
    ) -> None:
        self.enabled, self.stream, self.interval = enabled, stream, interval
        self.total, self.done, self.facts = total, initial, 0
        self.t0 = self._last = time.monotonic()
        self.start = initial
        self._bar: Any = None
        if enabled and stream.isatty():
            from tqdm import tqdm

            self._bar = tqdm(
                total=total, initial=initial, unit="ev", file=stream, dynamic_ncols=True, desc="ingest"
            )

    def update(self, events: int, facts: int) -> None:
        self.done += events
        self.facts += facts
        elapsed = max(time.monotonic() - self.t0, 1e-9)
        if self._bar is not None:
            self._bar.update(events)
            self._bar.set_postfix_str(f"facts/s={self.facts / elapsed:,.0f}", refresh=False)
            return
        now = time.monotonic()
        if self.enabled and now - self._last >= self.interval:
            self._last = now
            rate = (self.done - self.start) / elapsed
            eta = f", ETA {(self.total - self.done) / rate:,.0f} s" if self.total and rate else ""
            print(
                f"[pmem ingest] {self.done:,}/{self.total or '?'} events, {rate:,.0f} events/s, "
                f"{self.facts / elapsed:,.0f} facts/s{eta}",
                file=self.stream,
                flush=True,
            )

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
