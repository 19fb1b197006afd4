"""FactConsolidation 6k: the write-path audit and every arm end to end on sh_6k and mh_6k."""

from __future__ import annotations

import asyncio

import pytest
from arms_helpers import models

from pmem.arms import ARM_NAMES, make_arm
from pmem.arms._harness import run_history
from pmem.bench import iter_histories


@pytest.fixture(scope="module")
def sh():
    return next(iter_histories("factconsolidation", "sh_6k"))


@pytest.fixture(scope="module")
def mh():
    return next(iter_histories("factconsolidation", "mh_6k"))


def _ingested(name, h):
    arm = make_arm(name, models())
    asyncio.run(arm.ingest(list(h.events)))
    return arm


def test_oracle_write_path_audit_is_exact(sh):
    a = _ingested("pmem-oracle", sh).audit(sh)
    assert a["gold_keys"] == a["active_items"] == 294
    assert a["gold_in_active_cell"] == a["gold_in_matching_cell"] == 1.0
    assert a["stale_sibling_rate"] == 0.0 and a["overwritten_keys"] == 161


def test_extraction_write_path_audit(sh):
    arm = _ingested("pmem", sh)
    a = arm.audit(sh)
    assert a["gold_in_active_cell"] >= 0.98 and a["gold_in_matching_cell"] >= 0.98
    assert a["stale_sibling_rate"] <= 0.05
    stats = arm.write_stats()
    assert stats.facts == 455 and stats.cells == a["active_items"]
    # one extraction call per 1,000-character chunk, identity calls only for shortlisted keys
    calls = arm.extra()["calls_by_purpose"]
    assert calls["extract"] == 27 and "annotate" not in calls
    assert arm.extra()["identity"]["shortlisted"] == calls.get("identity", 0)
    raw = _ingested("raw", sh).audit(sh)
    assert raw["stale_sibling_rate"] == 1.0  # a flat store keeps every earlier value current


def test_question_audit_columns(sh):
    arm = make_arm("pmem", models())
    asyncio.run(run_history(arm, sh))
    audit = arm.extra()["question_audit"]
    assert set(audit) == {q.id for q in sh.questions}
    scoreable = [q for q in sh.questions if q.stale_key]
    assert scoreable and all("stale_sibling" in audit[q.id] for q in scoreable)
    assert sum(audit[q.id]["gold_in_active_cell"] for q in sh.questions) >= 95


@pytest.mark.parametrize("name", ARM_NAMES)
def test_every_arm_end_to_end(name, sh, mh):
    for h in (sh, mh):
        arm = make_arm(name, models())
        rows = asyncio.run(run_history(arm, h))
        assert len(rows) == 100
        assert all(
            r["read_tokens"] == (r["read_chars"] + 3) // 4 or r["read_tokens"] >= r["read_chars"] // 4
            for r in rows
        )
        if name != "no-memory":
            assert min(r["read_chars"] for r in rows) > 0
        if name == "pmem" and h is sh:
            assert sum(bool(r["correct"]) for r in rows) >= 95
