"""LoCoMo from the vendored official file: histories, question ids, categories, slices, schema errors.

Expectations are recomputed from the raw JSON (``json.load`` of the file) rather than through the
loader, so that a loader bug cannot agree with itself.
"""

from __future__ import annotations

import json
import re
import shutil
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from pmem.bench import LOCOMO_CATEGORIES, DataError, iter_histories
from pmem.bench._data import datasets_root
from pmem.bench._locomo import NOT_MENTIONED, evidence_sessions, iter_locomo, load_locomo

RAW: list[dict[str, Any]] = json.loads((datasets_root() / "locomo" / "locomo10.json").read_text())


def _sessions(conv: dict[str, Any]) -> list[int]:
    return sorted(int(k.split("_")[1]) for k in conv if re.fullmatch(r"session_\d+", k))


def test_one_history_per_conversation_its_turns_in_session_order() -> None:
    hs = list(iter_histories("locomo"))
    assert [h.id for h in hs] == [f"locomo/{r['sample_id']}" for r in RAW]
    assert sum(len(h.events) for h in hs) == 5882 and sum(len(h.questions) for h in hs) == 1986
    for h, rec in zip(hs, RAW, strict=True):
        conv = rec["conversation"]
        turns = [(n, t) for n in _sessions(conv) for t in conv[f"session_{n}"]]
        assert len(h.events) == len(turns)
        for e, (n, t) in zip(h.events, turns, strict=True):
            assert e.session_id == f"session_{n}" and e.role == t["speaker"] and e.source == "user"
            # the session's date, as ISO 8601
            stamp = datetime.strptime(conv[f"session_{n}_date_time"], "%I:%M %p on %d %B, %Y")
            assert e.time == stamp.isoformat()
            # a photo turn keeps its caption the way the official code shows it
            caption = f" [shares {t['blip_caption']}]" if t.get("blip_caption") else ""
            assert e.text == t["text"] + caption
        assert [e.index for e in h.events] == list(range(len(h.events)))
        assert {q.after_event for q in h.questions} == {len(h.events) - 1}  # after the last turn


def test_first_turn_of_the_first_conversation() -> None:
    h = next(iter_histories("locomo", conversations="conv-26"))
    e = h.events[0]
    assert (e.time, e.role, e.session_id) == ("2023-05-08T13:56:00", "Caroline", "session_1")
    assert e.text == "Hey Mel! Good to see you! How have you been?"
    photo = next(e for e in h.events if "[shares" in e.text)  # D1:5, a photo turn
    assert photo.index == 4 and photo.text == (
        "The transgender stories were so inspiring! I was so happy and thankful for all the support. "
        "[shares a photo of a dog walking past a wall with a painting of a woman]"
    )


def test_question_ids_are_the_official_positions_and_categories_are_named() -> None:
    names = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
    assert names == LOCOMO_CATEGORIES
    for h, rec in zip(iter_histories("locomo"), RAW, strict=True):
        assert [q.id for q in h.questions] == [f"{rec['sample_id']}/q{i}" for i in range(len(rec["qa"]))]
        for q, raw in zip(h.questions, rec["qa"], strict=True):
            assert q.qtype == names[raw["category"]] and q.params["category"] == raw["category"]
            if raw["category"] == 5:
                assert q.gold == (NOT_MENTIONED,) and not q.needs_judge
                options = q.params["options"]
                assert sorted(options.values()) == sorted([NOT_MENTIONED, str(raw["adversarial_answer"])])
                assert q.text == (
                    f"{raw['question']} Select the correct answer: (a) {options['a']} (b) {options['b']}."
                )
            else:
                assert q.text == raw["question"] and q.gold == (str(raw["answer"]),) and q.needs_judge


def test_category_counts_are_the_papers() -> None:
    """The LoCoMo paper's QA statistics (Table 5): single-hop 841, multi-hop 282, temporal 321,
    open-domain 96, adversarial 446 — the file's categories 4, 1, 2, 3, 5."""
    counts = Counter(q.qtype for h in iter_histories("locomo") for q in h.questions)
    assert counts == {
        "single-hop": 841,
        "multi-hop": 282,
        "temporal": 321,
        "open-domain": 96,
        "adversarial": 446,
    }


def test_adversarial_options_are_fixed_per_question() -> None:
    a = [q.params["options"] for h in iter_locomo() for q in h.questions if q.qtype == "adversarial"]
    b = [q.params["options"] for h in iter_locomo() for q in h.questions if q.qtype == "adversarial"]
    assert a == b
    first = Counter(o["a"] == NOT_MENTIONED for o in a)
    assert first[True] > 150 and first[False] > 150  # both orders, as the official coin flip gives


#: sessions=N: questions kept, by category (1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop, 5 adversarial)
SLICES = {
    1: {1: 3, 2: 16, 3: 5, 4: 29, 5: 13},
    2: {1: 13, 2: 37, 3: 9, 4: 56, 5: 29},
    3: {1: 19, 2: 49, 3: 11, 4: 90, 5: 43},
    4: {1: 24, 2: 57, 3: 15, 4: 121, 5: 65},
    5: {1: 31, 2: 69, 3: 20, 4: 142, 5: 75},
    10: {1: 61, 2: 126, 3: 38, 4: 274, 5: 149},
}


@pytest.mark.parametrize("n", sorted(SLICES))
def test_sessions_slice_keeps_questions_whose_evidence_it_holds(n: int) -> None:
    hs = list(iter_histories("locomo", sessions=n))
    counts = Counter(q.params["category"] for h in hs for q in h.questions)
    assert dict(counts) == SLICES[n]
    for h, rec in zip(hs, RAW, strict=True):
        conv = rec["conversation"]
        kept = _sessions(conv)[:n]
        assert h.id == f"locomo/{rec['sample_id']}/sessions={n}" and h.params["sessions"] == n
        assert len(h.events) == sum(len(conv[f"session_{s}"]) for s in kept)
        expected = [
            f"{rec['sample_id']}/q{i}"
            for i, q in enumerate(rec["qa"])
            if (cited := {int(m) for e in q["evidence"] for m in re.findall(r"D:?(\d+):\d+", e)})
            and cited <= set(kept)
        ]
        assert [q.id for q in h.questions] == expected


def test_evidence_references_in_the_files_odd_spellings() -> None:
    assert evidence_sessions(["D8:6; D9:17"]) == {8, 9}
    assert evidence_sessions(["D:11:26", "D30:05"]) == {11, 30}
    assert evidence_sessions(["D"]) == set() and evidence_sessions([]) == set()


def test_questions_cap_and_conversation_selection() -> None:
    hs = list(iter_histories("locomo", conversations="conv-30, conv-26", sessions=3, questions=4))
    assert [h.id for h in hs] == [
        "locomo/conv-30/sessions=3/questions=4",
        "locomo/conv-26/sessions=3/questions=4",
    ]
    full = next(iter_histories("locomo", conversations="conv-30", sessions=3))
    assert [q.id for q in hs[0].questions] == [q.id for q in full.questions[:4]]
    with pytest.raises(ValueError, match=r"unknown conversation\(s\) \['conv-99'\].*conv-26"):
        list(iter_histories("locomo", conversations="conv-99"))
    with pytest.raises(ValueError, match="sessions must be >= 0"):
        list(iter_histories("locomo", sessions=-1))
    # more sessions than a conversation has: all of it, every question
    assert len(next(iter_histories("locomo", conversations="conv-26", sessions=99)).questions) == 199


def _record(**change: Any) -> dict[str, Any]:
    rec: dict[str, Any] = {
        "sample_id": "conv-x",
        "conversation": {
            "speaker_a": "Ann",
            "speaker_b": "Bo",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [{"speaker": "Ann", "dia_id": "D1:1", "text": "Hi."}],
        },
        "qa": [{"question": "Who?", "answer": "Ann", "evidence": ["D1:1"], "category": 4}],
    }
    for path, value in change.items():
        *parents, leaf = path.split("__")
        node = rec
        for p in parents:
            node = node[int(p)] if p.isdigit() else node[p]
        node[int(leaf) if leaf.isdigit() else leaf] = value
    return rec


@pytest.mark.parametrize(
    ("change", "where", "field"),
    [
        ({"qa__0__category": 7}, "record 0 (conv-x) qa[0]", "category"),
        ({"qa__0__answer": None}, "record 0 (conv-x) qa[0]", "answer"),
        (
            {"conversation__session_1_date_time": "yesterday"},
            "record 0 (conv-x) conversation",
            "session_1_date_time",
        ),
        ({"conversation__session_1__0__text": 3}, "record 0 (conv-x) conversation.session_1[0]", "text"),
        ({"sample_id": None}, "record 0", "sample_id"),
    ],
)
def test_a_wrong_schema_is_one_data_error_naming_file_record_and_field(
    tmp_path: Path, change: dict[str, Any], where: str, field: str
) -> None:
    path = tmp_path / "locomo_bad.json"
    path.write_text(json.dumps([_record(**change)]))
    with pytest.raises(DataError) as err:
        load_locomo(path)
    assert str(err.value).startswith(f"{path}: {where}: field {field!r}"), str(err.value)


def test_a_wellformed_file_loads_and_non_list_json_is_refused(tmp_path: Path) -> None:
    ok = tmp_path / "ok.json"
    ok.write_text(json.dumps([_record()]))
    (conv,) = load_locomo(ok)
    assert conv.sample_id == "conv-x" and conv.sessions[0].time == "2023-05-08T13:56:00"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"sample_id": "conv-x"}))
    with pytest.raises(DataError, match="expected a JSON list of conversations"):
        load_locomo(bad)


def test_an_altered_vendored_file_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dst = tmp_path / "datasets"
    shutil.copytree(datasets_root(), dst)
    monkeypatch.setenv("PMEM_DATASETS", str(dst))
    data = json.loads((dst / "locomo" / "locomo10.json").read_text())
    data[0]["qa"][0]["answer"] = "tampered"
    (dst / "locomo" / "locomo10.json").write_text(json.dumps(data))
    with pytest.raises(DataError, match=r"locomo10\.json does not match its sha256"):
        next(iter_histories("locomo"))
