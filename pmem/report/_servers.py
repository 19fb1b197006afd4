"""What the model servers say they received, against what ``requests/`` recorded.

A hosted model's replicas (llama.cpp's and vLLM's servers, both uvicorn) log one access line per
request; the sweep keeps each replica's log in the run's ``logs/`` (a resumed sweep adds its own, see
:meth:`pmem.models.ReplicaPool.save_logs`). Every request a server answered should be one ``requests/``
row carrying the server's HTTP status, and a row the server answered should carry the server's own
token counts, not an estimate. This table counts both sides per status, so a request the harness lost
(or recorded twice) shows as a difference.
"""

from __future__ import annotations

import re
from collections import Counter

import polars as pl

from pmem.report._base import Metrics
from pmem.report._table import Table
from pmem.rundir import LOGS
from pmem.rundir import columns as C

#: one access-log line of a model call (chat or embeddings) a uvicorn-based server answered
ACCESS_LINE = re.compile(rb'"POST /v1/(?:chat/completions|completions|embeddings) HTTP/1\.[01]" (\d{3})')
#: the servers' logs among the run's logs (the sweep's own progress log is not one)
SERVER_LOG_GLOB = "*-replica-*.log"


def server_statuses(m: Metrics) -> tuple[Counter[int], int]:
    """The HTTP statuses of every model call the kept server logs answered, and how many logs there are."""
    logs = sorted((m.run.path / LOGS).glob(SERVER_LOG_GLOB))
    found: Counter[int] = Counter()
    for log in logs:
        found.update(int(s) for s in ACCESS_LINE.findall(log.read_bytes()))
    return found, len(logs)


def server_log_table(m: Metrics) -> Table:
    """Per HTTP status: requests the servers' access logs list, ``requests/`` rows with that status, and
    how many of those rows carry estimated instead of the server's token counts."""
    notes = [
        "Each hosted model server logs one line per request it answered; the sweep keeps every replica's "
        "log in logs/. received: those lines; recorded: requests/ rows with that http_status; estimated "
        "tokens: recorded rows whose token counts are the harness's estimate, not the server's usage. "
        "A history a stop interrupted is redone whole on resume, and its first attempt's requests belong "
        "to no committed history: they appear as received, not recorded.",
    ]
    table = Table(
        "server_requests",
        "Requests the model servers received",
        pl.DataFrame(),
        None,
        notes,
        keys=("http_status",),
        values=("received", "recorded", "estimated_tokens"),
        section="replies",
    )
    received, logs = server_statuses(m)
    if not logs:
        notes.append("No server log in logs/ (no hosted model, or a run that predates kept logs).")
        return table
    req = m.run.frame("requests")
    have = set(m.run.columns("requests")) if req is not None else set()
    if req is None or C.HTTP_STATUS not in have:
        notes.append("requests/ is missing or has no http_status column: recorded cannot be counted.")
        return table
    estimated = pl.col(C.TOKENS_ESTIMATED).fill_null(False) if C.TOKENS_ESTIMATED in have else pl.lit(False)
    recorded = (
        req.filter(pl.col(C.HTTP_STATUS).is_not_null())
        .group_by(C.HTTP_STATUS)
        .agg(pl.len().alias("recorded"), estimated.sum().alias("estimated_tokens"))
        .collect()
    )
    by_status = {int(r[C.HTTP_STATUS]): r for r in recorded.iter_rows(named=True)}
    statuses = sorted(set(received) | set(by_status))
    table.data = pl.DataFrame(
        {
            "http_status": statuses,
            "received": [received.get(s, 0) for s in statuses],
            "recorded": [int(by_status[s]["recorded"]) if s in by_status else 0 for s in statuses],
            "estimated_tokens": [
                int(by_status[s]["estimated_tokens"]) if s in by_status else 0 for s in statuses
            ],
        },
        schema={
            "http_status": pl.Int64,
            "received": pl.Int64,
            "recorded": pl.Int64,
            "estimated_tokens": pl.Int64,
        },
    )
    total_in, total_rec = sum(received.values()), int(table.data["recorded"].sum())
    verdict = (
        "every request the servers answered is one requests/ row"
        if table.data["received"].to_list() == table.data["recorded"].to_list()
        else f"{total_in - total_rec:+,} requests the servers answered are not requests/ rows"
    )
    table.footer.append(
        f"{logs} server logs, {total_in:,} requests received, {total_rec:,} recorded: {verdict}."
    )
    return table
