"""requests/ in the report: the reply-quality table, costs without failed-history rows, embed calls not
charged as writes, and the agent model's label and caveat."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from benchmarks.synthetic import write_fixture_run
from pmem.report import build_report, compute, open_run
from pmem.report._load import model_caveat, model_label
from pmem.report._replies import REPLY_COLUMNS
from pmem.rundir import columns as C


def small_run(root: Path) -> Path:
    return write_fixture_run(root, seed=3, n_alf=2, fc_questions=5)


def request_rows(root: Path) -> pl.DataFrame:
    return pl.concat(
        [pl.read_parquet(f) for f in sorted((root / "requests").glob("*.parquet"))], how="diagonal_relaxed"
    )


def add_requests(root: Path, name: str, template: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    """Write ``rows`` (each over ``template``, a request row of the run) as one more requests/ file."""
    schema = request_rows(root).schema
    pl.DataFrame([{**template, **r} for r in rows], schema=schema).write_parquet(
        root / "requests" / f"{name}.parquet"
    )


def a_request(root: Path, arm: str, subset: str) -> dict[str, Any]:
    """A request row of a complete history of ``arm`` in ``subset``."""
    df = request_rows(root)
    return df.filter((pl.col(C.ARM) == arm) & (pl.col(C.SUBSET) == subset)).row(0, named=True)


# -- reply quality ---------------------------------------------------------------------------------------


def test_reply_quality_counts_every_request_kind(tmp_path: Path) -> None:
    root = small_run(tmp_path / "run")
    base = compute(open_run(root)).tables["reply_quality"].data
    before = base.filter((pl.col(C.ARM) == "pmem") & (pl.col(C.PURPOSE) == "extract")).row(0, named=True)
    t = a_request(root, "pmem", "sh_6k")
    t[C.PURPOSE] = "extract"
    add_requests(
        root,
        "quality",
        t,
        [
            # a call retried after a 503, then answered but cut at max_tokens
            {C.HTTP_ATTEMPT: 1, C.HTTP_STATUS: 503, C.ERROR: "HTTP 503"},
            {C.HTTP_ATTEMPT: 2, C.HTTP_STATUS: 200, C.FINISH_REASON: "length", C.REPLY: '{"facts": ['},
            # refused: the prompt does not fit
            {C.HTTP_ATTEMPT: 1, C.HTTP_STATUS: 400, C.ERROR: "the prompt does not fit the model's context"},
            # a timeout (no response), then a reply that did not parse
            {C.HTTP_ATTEMPT: 1, C.HTTP_STATUS: None, C.ERROR: "timeout after 120 s"},
            {C.HTTP_ATTEMPT: 2, C.HTTP_STATUS: 200, C.PARSE_ERROR: "Expecting value", C.REPLY: "nope"},
            # written by a failed run of its history: evidence, counted here
            {C.HTTP_ATTEMPT: 1, C.HTTP_STATUS: 500, C.ERROR: "HTTP 500", C.HISTORY_FAILED: True},
            # a cache hit: no server saw it
            {C.HTTP_ATTEMPT: None, C.CACHED: True},
        ],
    )
    got = (
        compute(open_run(root))
        .tables["reply_quality"]
        .data.filter((pl.col(C.ARM) == "pmem") & (pl.col(C.PURPOSE) == "extract"))
        .row(0, named=True)
    )
    added = {k: got[k] - (before[k] or 0) for k in REPLY_COLUMNS}
    assert added == {
        "requests": 7,
        "sent": 6,
        "failed": 4,
        "refused": 1,
        "server_errors": 2,
        "no_response": 1,
        "context_overflow": 1,
        "truncated": 1,
        "unparseable": 1,
        "retries": 2,
        "failed_history_rows": 1,
    }


def test_reply_quality_names_missing_columns_of_old_runs(tmp_path: Path) -> None:
    """A run written before the columns existed: its counts are 'missing', never zero."""
    root = small_run(tmp_path / "run")
    new = [C.HTTP_ATTEMPT, C.HTTP_STATUS, C.FINISH_REASON, C.PARSE_ERROR, C.REPLY, C.HISTORY_FAILED]
    for f in (root / "requests").glob("*.parquet"):
        pl.read_parquet(f).drop(new).write_parquet(f)
    t = compute(open_run(root)).tables["reply_quality"]
    assert t.data.height and "sent" not in t.data.columns and "truncated" not in t.data.columns
    assert t.data["requests"].sum() == request_rows(root).height  # what the old columns can say is shown
    assert set(t.shown[REPLY_COLUMNS["truncated"][2]].to_list()) == {f"missing (no {C.FINISH_REASON} column)"}
    assert any("predates" in n and C.HTTP_ATTEMPT in n for n in t.notes)
    md = build_report(root).markdown.read_text()
    assert "Model replies" in md and "missing (no http_attempt column)" in md


# -- costs -----------------------------------------------------------------------------------------------


def test_failed_history_rows_are_not_costs(tmp_path: Path) -> None:
    """A history that failed and then completed leaves its failed run's calls: evidence, not cost."""
    root = small_run(tmp_path / "run")
    base = compute(open_run(root))
    t = a_request(root, "pmem", "sh_6k")
    add_requests(
        root,
        "failed-run",
        t,
        [
            {C.PURPOSE: "extract", C.PROMPT_TOKENS: 9000, C.HISTORY_FAILED: True},
            {C.PURPOSE: "answer", C.PROMPT_TOKENS: 9000, C.ERROR: "boom", C.HISTORY_FAILED: True},
        ],
    )
    m = compute(open_run(root))
    for name in ("write_cost", "break_even"):
        assert_frame_equal(m.tables[name].data, base.tables[name].data)
    # the same rows from a complete run would be charged: the filter, not the row, keeps them out
    add_requests(root, "complete-run", t, [{C.PURPOSE: "extract", C.PROMPT_TOKENS: 9000}])
    wc = compute(open_run(root)).tables["write_cost"].data
    assert not wc.equals(base.tables["write_cost"].data)


def test_embed_calls_are_not_write_calls(tmp_path: Path) -> None:
    """Embedding calls carry purpose "embed" at write and at read time alike: none is charged as a write,
    so a read-time arm that embeds its queries stays a read-time arm in the break-even table."""
    root = small_run(tmp_path / "run")
    base = compute(open_run(root))
    t = a_request(root, "raw", "sh_6k")
    add_requests(root, "embeds", t, [{C.PURPOSE: "embed", C.PROMPT_TOKENS: 40, C.COMPLETION_TOKENS: 0}] * 3)
    m = compute(open_run(root))
    assert_frame_equal(m.tables["break_even"].data, base.tables["break_even"].data)
    cols = ["write_calls_per_history", "write_tokens_per_history"]
    assert_frame_equal(m.tables["write_cost"].data.select(cols), base.tables["write_cost"].data.select(cols))
    wc = m.tables["write_cost"].data.filter((pl.col(C.SUBSET) == "sh_6k") & (pl.col(C.ARM) == "raw"))
    assert wc["embed_calls_per_history"][0] == pytest.approx(3 / wc["histories"][0])
    note = " ".join(m.tables["break_even"].notes)
    assert "embed" in note and "not charged" in note


# -- model label -----------------------------------------------------------------------------------------


def test_model_label_names_model_backend_and_device() -> None:
    spec = {"backend": "llamacpp", "model": "smollm2-135m-instruct"}
    assert model_label(spec) == "SmolLM2-135M-Instruct, llama.cpp, CPU"
    assert model_label({**spec, "n_gpu_layers": 99}) == "SmolLM2-135M-Instruct, llama.cpp, GPU"
    caveat = model_caveat(spec)
    assert caveat is not None and "135M-parameter model" in caveat and "not the paper's accuracy" in caveat
    openai = {
        "backend": "openai",
        "model": "Qwen/Qwen3-4B-Instruct-2507",
        "url": "http://k:s@10.0.0.2:8000/v1",
    }
    assert model_label(openai) == "Qwen/Qwen3-4B-Instruct-2507, openai, server 10.0.0.2:8000"
    assert model_caveat(openai) is None  # a 4B model: no caveat
    assert model_label({"backend": "heuristic"}) == "heuristic (no LLM)"


def test_llamacpp_agent_label_and_caveat_in_report(tmp_path: Path) -> None:
    root = small_run(tmp_path / "run")
    toml = (root / "run.toml").read_text()
    agent = '[config.models.agent]\nbackend = "heuristic"\nmodel = "heuristic"\n'
    assert agent in toml
    (root / "run.toml").write_text(
        toml.replace(agent, '[config.models.agent]\nbackend = "llamacpp"\nmodel = "smollm2-135m-instruct"\n')
    )
    paths = build_report(root)
    md, html = paths.markdown.read_text(), paths.html.read_text()
    for text in (md, html):
        assert "SmolLM2-135M-Instruct, llama.cpp, CPU" in text
        assert "135M-parameter model measures the pipeline under real tokens" in text
        assert "heuristic (no LLM). A deterministic" not in text
