"""The judge's calibration set: rebuilt exactly by its rules, every case a real LoCoMo question, and the
audited gold traced to the audit's file."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from pmem.bench import RIGHT_KINDS, WRONG_KINDS, calibration_cases, iter_histories
from pmem.bench._data import DataError, datasets_root
from pmem.bench._judge_calibration import HANDWRITTEN_FILE, build_calibration
from pmem.bench._locomo import audit_corrections, load_locomo


def test_the_committed_set_is_what_its_rules_build() -> None:
    committed = calibration_cases()
    assert build_calibration(datasets_root() / HANDWRITTEN_FILE) == committed
    kinds = Counter((c.kind, c.expected) for c in committed)
    assert kinds == {**{(k, True): 30 for k in RIGHT_KINDS}, **{(k, False): 30 for k in WRONG_KINDS}}
    assert len({c.id for c in committed}) == len(committed)


def test_every_case_is_a_locomo_question_with_its_gold() -> None:
    qa = {f"{c.sample_id}/q{i}": q for c in load_locomo() for i, q in enumerate(c.qa)}
    for case in calibration_cases():
        q = qa[case.question_id]
        assert (case.question, case.gold) == (q["question"], str(q["answer"])), case.id
        assert case.response and case.response != case.gold


def test_a_handwritten_file_that_is_not_the_schema_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "handwritten.json"
    bad.write_text(json.dumps([{"question_id": "conv-26/q3"}]))
    with pytest.raises(DataError, match=r"handwritten\.json"):
        build_calibration(bad)


def test_the_audited_gold_replaces_the_original_and_keeps_it_beside() -> None:
    original = {q.id: q for h in iter_histories("locomo", sessions=2) for q in h.questions}
    audited = {q.id: q for h in iter_histories("locomo", sessions=2, gold="audited") for q in h.questions}
    changed = [qid for qid, q in original.items() if q.alt_gold is not None]
    # the slice's category 1-4 questions the audit changes (remarks such as "(answer is correct, but
    # the question says 2023)" are not gold: those answers stay as they were)
    assert sorted(changed) == [
        "conv-26/q2",
        "conv-26/q5",
        "conv-42/q4",
        "conv-42/q5",
        "conv-48/q0",
        "conv-49/q4",
        "conv-50/q1",
    ]
    for qid in changed:
        kind, answer = original[qid].alt_gold
        assert kind == "audited" and audited[qid].gold == (answer,)
        assert audited[qid].alt_gold == ("original", original[qid].gold[0])
        assert original[qid].params["audit_error"] != "WRONG_CITATION"
    assert original["conv-26/q5"].alt_gold == ("audited", "The Saturday before 25 May 2023")
    assert all(audited[q].gold == original[q].gold for q in original if q not in changed)
    assert len(audit_corrections()) == 89


def test_an_unknown_gold_is_refused() -> None:
    with pytest.raises(ValueError, match="gold must be one of original, audited"):
        next(iter_histories("locomo", sessions=1, gold="fixed"))


def test_the_held_out_answers_are_questions_outside_the_set() -> None:
    from pmem.bench._judge_calibration import handwritten_cases

    held = handwritten_cases(datasets_root() / "locomo-judge" / "heldout.json")
    assert Counter((c.kind, c.expected) for c in held) == {
        ("paraphrase", True): 20,
        ("vague-topical", False): 20,
    }
    assert not {c.question_id for c in held} & {c.question_id for c in calibration_cases()}
