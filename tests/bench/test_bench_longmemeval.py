"""LongMemEval: loader and hash check on synthetic fixtures in the official schema, judge prompts."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pmem.bench import iter_histories
from pmem.bench._data import DataError
from pmem.bench._judge import (
    JUDGE_MAX_TOKENS,
    JUDGE_PREAMBLES,
    JUDGE_TEMPERATURE,
    QUESTION_TYPE_KINDS,
    StaleValues,
    answer_class_prompt,
    is_stale_prediction,
    judge_kind,
    judge_messages,
    judge_prompt,
    judge_verdict,
    parse_answer_class,
    parse_stale_values,
    stale_extraction_prompt,
)
from pmem.bench._longmemeval import OFFICIAL, evidence_text, load_longmemeval
from pmem.models.sections import parse_sections

FIXTURES = Path(__file__).parent / "fixtures"
FIXTURE = FIXTURES / "longmemeval_synthetic.json"
CLASSES = FIXTURES / "longmemeval_synthetic_classes.json"
# ../shared beside the checkout (as laid out for developers and CI); skipped where absent
DERIVATIVE = (
    Path(__file__).resolve().parents[3]
    / "shared"
    / "data"
    / "longmemeval"
    / "derivative_3q_longmemeval_s_MuhammadNoor7.json"
)


def _fixture_sha() -> str:
    line = (FIXTURES / "SHA256SUMS").read_text().split()
    assert line[1] == FIXTURE.name
    return line[0]


def test_loader_accepts_fixture_with_its_hash() -> None:
    data = load_longmemeval(FIXTURE, "oracle", expected_sha256=_fixture_sha())
    assert data.verified and len(data.records) == 8
    hs = list(iter_histories("longmemeval", "oracle", path=FIXTURE, expected_sha256=_fixture_sha()))
    assert [h.id for h in hs][:2] == ["longmemeval/oracle/syn_ku_001", "longmemeval/oracle/syn_ku_002"]
    h = hs[0]
    assert [e.session_id for e in h.events] == ["syn_s1", "syn_s1", "syn_s2", "syn_s2", "syn_s3", "syn_s3"]
    assert [e.role for e in h.events][:2] == ["user", "assistant"]
    assert h.events[0].time == "2023/05/01 (Mon) 08:00"
    (q,) = h.questions
    assert q.needs_judge and q.gold == ("25:50",) and q.qtype == "knowledge-update"
    assert q.after_event == len(h.events) - 1 and q.question_date == "2023/11/02 (Thu) 09:00"
    assert h.params["data_verified"] is True


def test_sessions_become_turns_in_date_order() -> None:
    h = next(
        h
        for h in iter_histories("longmemeval", "oracle", path=FIXTURE, expected_sha256=_fixture_sha())
        if h.id.endswith("syn_ku_002")
    )
    assert [e.session_id for e in h.events] == ["syn_b1", "syn_b1", "syn_b2", "syn_b2"]
    assert h.events[0].text.startswith("I have two bikes")


def test_official_hash_refuses_other_files(tmp_path: Path) -> None:
    # The fixture named like the official file is refused: its sha256 is not the official one.
    fake = tmp_path / "longmemeval_oracle.json"
    shutil.copy(FIXTURE, fake)
    with pytest.raises(DataError) as err:
        load_longmemeval(fake)
    msg = str(err.value)
    assert str(fake) in msg and OFFICIAL["oracle"][1] in msg and "not the official" in msg
    with pytest.raises(DataError, match="does not match"):
        load_longmemeval(FIXTURE, "s", expected_sha256="0" * 64)
    with pytest.raises(DataError, match="does not exist"):
        load_longmemeval(tmp_path / "longmemeval_s_cleaned.json")
    with pytest.raises(DataError, match="not run: data not provided"):
        next(iter_histories("longmemeval", "s"))
    with pytest.raises(DataError, match="cannot tell the LongMemEval subset"):
        load_longmemeval(FIXTURE)


@pytest.mark.parametrize(
    ("mutate", "needle"),
    [
        (lambda r: r[0].pop("answer"), "field 'answer' is missing"),
        (lambda r: r[1].__setitem__("haystack_dates", ["2024/01/15 (Mon) 19:00"]), "differ in length"),
        (lambda r: r[2]["haystack_sessions"][0][0].__setitem__("role", "system"), "haystack_sessions[0][0]"),
        (lambda r: r[3].__setitem__("question_type", "trivia"), "unknown question_type 'trivia'"),
        (lambda r: r[4].__setitem__("question", ["a list"]), "field 'question' has type list"),
    ],
)
def test_schema_errors_name_record_and_field(tmp_path: Path, mutate, needle: str) -> None:
    records = json.loads(FIXTURE.read_text())
    mutate(records)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(records))
    with pytest.raises(DataError) as err:
        load_longmemeval(bad, "oracle", verify=False)
    assert needle in str(err.value) and str(bad) in str(err.value)


def test_non_official_schema_derivative_is_refused() -> None:
    if not DERIVATIVE.is_file():
        pytest.skip("shared derivative file not present")
    with pytest.raises(DataError, match="not the official LongMemEval file"):
        load_longmemeval(DERIVATIVE, "s")
    with pytest.raises(DataError) as err:
        load_longmemeval(DERIVATIVE, "s", verify=False)
    assert "field 'question' is missing" in str(err.value) and "'questions'" in str(err.value)


def test_unverified_smoke_load_is_labelled() -> None:
    hs = list(iter_histories("longmemeval", "s", path=FIXTURE, verify=False))
    assert hs and all(h.params["data_verified"] is False for h in hs)
    assert all(h.subset == "s" for h in hs)


def test_ku_and_answer_class_selection() -> None:
    kw = {"path": FIXTURE, "expected_sha256": _fixture_sha()}
    ku = [h.questions[0].id for h in iter_histories("longmemeval", "oracle", ku=True, **kw)]
    assert ku == ["syn_ku_001", "syn_ku_002", "syn_ku_003_abs"]
    assert [h.questions[0].id for h in iter_histories("longmemeval", "oracle-ku", **kw)] == ku
    sup = list(
        iter_histories("longmemeval", "oracle", answer_class="superseded", answer_classes=CLASSES, **kw)
    )
    assert [h.questions[0].id for h in sup] == ["syn_ku_001", "syn_ku_002"]
    assert all(h.questions[0].answer_class == "superseded" for h in sup)
    agg = list(
        iter_histories("longmemeval", "oracle", answer_class="aggregation", answer_classes=CLASSES, **kw)
    )
    assert {h.questions[0].qtype for h in agg} == {"multi-session", "temporal-reasoning"}
    with pytest.raises(ValueError, match="stored classification"):
        next(iter_histories("longmemeval", "oracle", answer_class="single", **kw))
    with pytest.raises(DataError, match="class 'weird'"):
        next(iter_histories("longmemeval", "oracle", answer_classes={"syn_ku_001": "weird"}, **kw))


@pytest.mark.parametrize(
    ("qtype", "qid", "kind", "phrase"),
    [
        ("single-session-user", "a1", "general", "only part"),
        ("single-session-assistant", "a2", "general", "intermediate step"),
        ("multi-session", "a3", "general", "equivalent"),
        ("temporal-reasoning", "a4", "temporal", "off-by-one"),
        ("knowledge-update", "a5", "knowledge-update", "earlier information"),
        ("single-session-preference", "a6", "preference", "rubric"),
        ("knowledge-update", "a7_abs", "abstention", "cannot be answered"),
        ("temporal-reasoning", "a8_abs", "abstention", "cannot be answered"),
        ("single-session-user", "a9_abs", "abstention", "cannot be answered"),
    ],
)
def test_judge_prompt_selection(qtype: str, qid: str, kind: str, phrase: str) -> None:
    assert judge_kind(qtype, qid) == kind
    text = judge_prompt(qtype, qid, "What is it?", "the reference", "the response")
    assert phrase in text and text.startswith(JUDGE_PREAMBLES[kind])
    sec = parse_sections(text)
    assert (sec["QUESTION"], sec["REFERENCE"], sec["RESPONSE"]) == (
        "What is it?",
        "the reference",
        "the response",
    )
    assert set(sec) == {"", "QUESTION", "REFERENCE", "RESPONSE"}
    assert judge_messages(qtype, qid, "q", "r", "p")[0]["role"] == "user"


def test_every_official_type_has_a_distinct_rule_where_required() -> None:
    assert set(QUESTION_TYPE_KINDS) == {
        "single-session-user",
        "single-session-assistant",
        "multi-session",
        "temporal-reasoning",
        "knowledge-update",
        "single-session-preference",
    }
    # LongMemEval's five rules (LoCoMo's J rubric is the sixth preamble)
    assert len({v for k, v in JUDGE_PREAMBLES.items() if k != "locomo"}) == 5
    with pytest.raises(ValueError, match="unknown LongMemEval question_type"):
        judge_kind("trivia", "x")
    assert (JUDGE_TEMPERATURE, JUDGE_MAX_TOKENS) == (0.0, 10)


def test_verdict_and_stale_extraction() -> None:
    assert judge_verdict("Yes") and judge_verdict("yes.") and not judge_verdict("No")
    rec = json.loads(FIXTURE.read_text())[0]
    ev = evidence_text(rec)
    assert "27:12" in ev and "25:50" in ev and "stretching" not in ev
    prompt = stale_extraction_prompt(rec["question"], rec["answer"], ev)
    assert parse_sections(prompt)["CONTEXT"] == ev
    vals = parse_stale_values("SUPERSEDED: 27:12\nCURRENT: 25:50")
    assert vals == StaleValues("27:12", "25:50") and vals.scoreable
    assert is_stale_prediction("Your PB is 27:12", False, vals) is True
    assert is_stale_prediction("Your PB is 25:50", True, vals) is False
    assert is_stale_prediction("No idea", False, vals) is False
    same = parse_stale_values("SUPERSEDED: none\nCURRENT: 25:50")
    assert not same.scoreable and is_stale_prediction("27:12", False, same) is None
    assert not parse_stale_values("SUPERSEDED: 3\nCURRENT: 3").scoreable
    assert "superseded" in answer_class_prompt("q", "r", "e")
    assert parse_answer_class("Aggregation") == "aggregation" and parse_answer_class("hmm") is None
