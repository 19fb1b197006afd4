"""Every number in the report: :func:`compute` gathers a run's tables, in report order, from the metric
modules below it.

Where each table is computed: per-history counts and intervals in :mod:`pmem.report._counts`; coverage in
:mod:`~pmem.report._coverage`; the paper's benchmark views in :mod:`~pmem.report._benchmarks`; the
all-cells accuracy and stale tables in :mod:`~pmem.report._accuracy`; paired comparisons in
:mod:`~pmem.report._paired`; token and call costs in :mod:`~pmem.report._cost`; reply quality in
:mod:`~pmem.report._replies`; the write-path audit in :mod:`~pmem.report._audit` and what the saved states hold in
:mod:`~pmem.report._states`; the provenance probes,
the published figures and the peers table in :mod:`~pmem.report._probes`, :mod:`~pmem.report._published`
and :mod:`~pmem.report._peers`; the summary that opens the report, from those tables, in
:mod:`~pmem.report._summary`.
"""

from __future__ import annotations

import polars as pl

from pmem.report._accuracy import accuracy_table, stale_table
from pmem.report._audit import audit_table
from pmem.report._base import Metrics, group_keys
from pmem.report._benchmarks import conflict_table, table6, table7, table8, two_step_table
from pmem.report._cost import break_even_table, read_cost_table, write_cost_table
from pmem.report._counts import history_counts, summarize
from pmem.report._coverage import coverage_table
from pmem.report._judge import judge_calibration_table, judge_rules_table
from pmem.report._load import Run
from pmem.report._locomo import adversarial_table, citation_table, f1_paired_table, locomo_table
from pmem.report._paired import paired_vs_reference_table
from pmem.report._peers import peer_table
from pmem.report._probes import probe_tables
from pmem.report._published import locomo_published_table, published_table
from pmem.report._replies import reply_quality_table
from pmem.report._servers import server_log_table
from pmem.report._states import state_table
from pmem.report._summary import summary_table


def compute(run: Run, *, reference: str = "pmem") -> Metrics:
    params = run.params()
    hist = history_counts(run)
    acc = summarize(hist, group_keys(params)) if hist.height else pl.DataFrame()
    m = Metrics(run=run, params=params, hist=hist, accuracy=acc)
    t = m.tables
    t["coverage"] = coverage_table(m)
    t["table6_chains"] = table6(m)
    t["table8_retraction"] = table8(m)
    t["conflict_probe"] = conflict_table(m)
    t["two_step"] = two_step_table(m)
    t["table7_factconsolidation"] = table7(m)
    t["locomo"] = locomo_table(m)
    t["locomo_adversarial"] = adversarial_table(m)
    t["locomo_citations"] = citation_table(m)
    t["locomo_f1_paired"] = f1_paired_table(m, reference)
    t["judge_calibration"] = judge_calibration_table(m)
    t["judge_rules"] = judge_rules_table(m)
    t["accuracy"] = accuracy_table(m)
    t["stale_rate"] = stale_table(m)
    t["paired"] = paired_vs_reference_table(m, reference)
    t["read_cost"] = read_cost_table(m)
    t["write_cost"] = write_cost_table(m)
    t["break_even"] = break_even_table(m, t["read_cost"], t["write_cost"])
    t["reply_quality"] = reply_quality_table(m)
    t["server_requests"] = server_log_table(m)
    t["write_audit"] = audit_table(m)
    t["state_contents"] = state_table(m)
    t.update(probe_tables(m))
    t["published_vs_ours"] = published_table(m)
    t["published_locomo_vs_ours"] = locomo_published_table(m)
    t["peers"] = peer_table(m)
    # last: the headline sentences quote the tables above
    t["summary"] = summary_table(m, reference)
    return m
