"""A LoCoMo sweep writes the official question ids and LoCoMo's f1 and bleu1 per answer, the judge
decides categories 1-4 where one is configured, and the run still verifies after the judge's rewrite."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pyarrow.parquet as pq
from runner_helpers import config, read

from pmem.bench import JUDGE_VERSION, calibration_cases, evidence_turns, iter_histories, score_question
from pmem.cli import main
from pmem.report import compute, open_run
from pmem.rundir import LOGS, RESULTS, verify_commits
from pmem.rundir import columns as C
from pmem.runner import load_config, run_sweep

BODY = """
[run]
runners = 1
flush_s = 0.1
[[benchmarks]]
name = "locomo"
sessions = 1
conversations = "conv-26,conv-30"
arms = ["long-context", "pmem"]
[arm_options.pmem]
read_tokens = 300
# a hosted judge (the stand-in server): the judging pass starts its replicas, and keeps their logs
[models.judge]
backend = "vllm"
model = "heuristic"
launcher = "standin"
health_timeout_s = 60
"""


def test_a_locomo_sweep_writes_ids_f1_bleu1_and_judge_verdicts(ray_cluster, tmp_path: Path) -> None:
    spec = load_config(config(tmp_path, BODY, name="locomo"))
    res = run_sweep(spec, out=tmp_path / "runs", progress_enabled=False)
    assert (res.total, res.completed, res.failed) == (4, 4, 0)
    questions = {
        (h.id, q.id): q
        for h in iter_histories("locomo", sessions=1, conversations="conv-26,conv-30")
        for q in h.questions
    }
    rows = read(res.run_dir, "results").to_pylist()
    assert len(rows) == 2 * len(questions)
    assert {(r[C.HISTORY_ID], r[C.QUESTION_ID]) for r in rows} == set(questions)
    judged = [r for r in rows if r[C.QUESTION_TYPE] != "adversarial"]
    adversarial = [r for r in rows if r[C.QUESTION_TYPE] == "adversarial"]
    assert judged and adversarial
    for r in rows:
        # the scores the benchmark's scorer gives this prediction, as the runner wrote them
        s = score_question("locomo", questions[(r[C.HISTORY_ID], r[C.QUESTION_ID])], r[C.PREDICTION])
        assert (r[C.F1], r[C.BLEU1]) == (s.f1, s.bleu1)
    assert all(isinstance(r[C.F1], float) and 0.0 <= r[C.BLEU1] <= 1.0 for r in judged)
    # a question whose audited gold differs is scored on both golds, and judged on both
    audited = [r for r in rows if r[C.ALT_GOLD] is not None]
    assert {r[C.QUESTION_ID] for r in audited} == {"conv-26/q2"}
    for r in audited:
        q = questions[(r[C.HISTORY_ID], r[C.QUESTION_ID])]
        assert (r[C.ALT_GOLD_KIND], r[C.ALT_GOLD]) == q.alt_gold == ("audited", "Counseling or mental health")
        other = score_question("locomo", dataclasses.replace(q, gold=(r[C.ALT_GOLD],)), r[C.PREDICTION])
        assert r[C.ALT_F1] == other.f1 and r[C.ALT_CORRECT] is not None
    assert all(r[C.ALT_F1] is None and r[C.ALT_CORRECT] is None for r in rows if r[C.ALT_GOLD] is None)
    # what each read cites, as LoCoMo names turns, beside the question's own evidence turns
    for r in rows:
        q = questions[(r[C.HISTORY_ID], r[C.QUESTION_ID])]
        assert r[C.EVIDENCE_TURNS] == list(evidence_turns(q)) and r[C.EVIDENCE_TURNS]
    pmem = [r for r in rows if r[C.ARM] == "pmem"]
    assert all(r[C.READ_CITES] and r[C.READ_TOKENS] <= 300 for r in pmem)
    assert all(turn in r[C.READ_CONTEXT] for r in pmem for turn in r[C.READ_CITES])
    assert all(r[C.READ_CITES] == [] for r in rows if r[C.ARM] == "long-context")
    assert {r[C.JUDGE_MODEL] for r in judged} == {"heuristic"}
    # adversarial questions are scored by the official abstention rule, never judged
    assert all(r[C.F1] is None and r[C.JUDGE_MODEL] is None and r[C.CORRECT] is not None for r in adversarial)
    assert read(res.run_dir, "judgments").num_rows == len(judged)
    # the judge's replica log is kept with the run's (the report counts its requests against requests/)
    (judge_log,) = (res.run_dir / LOGS).glob("judge*-replica-0.log")
    assert b"serving" in judge_log.read_bytes()
    # the judge rewrote results parts in place: their new digests are in the commit records
    assert verify_commits(res.run_dir) == []
    m = compute(open_run(res.run_dir))
    table = m.tables["locomo"].data
    assert set(table[C.ARM].to_list()) == {"long-context", "pmem"}
    assert set(table["judged"].to_list()) != {0}
    assert not m.tables["published_locomo_vs_ours"].empty
    # what decided each verdict, and the judge's own reply where the model decided
    assert {r[C.JUDGE_VERSION] for r in judged} == {JUDGE_VERSION}
    by_model = [r for r in judged if r[C.JUDGE_RULE] == "model"]
    assert by_model and all(r[C.JUDGE_RAW] for r in by_model)
    assert all(r[C.JUDGE_RAW] is None for r in judged if r[C.JUDGE_RULE] != "model")
    # the judge measured on the calibration set, and the report shows it
    calibration = read(res.run_dir, "calibration").to_pylist()
    assert len(calibration) == len(calibration_cases())
    assert {r["judge_version"] for r in calibration} == {JUDGE_VERSION}
    assert not m.tables["judge_calibration"].empty and not m.tables["judge_rules"].empty


def test_rejudge_replaces_an_older_judges_verdicts_keeps_them_and_resumes(
    ray_cluster, tmp_path: Path
) -> None:
    spec = load_config(
        config(
            tmp_path,
            BODY.replace('"long-context", "pmem"', '"long-context"').replace(
                "[arm_options.pmem]\nread_tokens = 300\n", ""
            ),
            name="rejudge",
        )
    )
    res = run_sweep(spec, out=tmp_path / "runs", progress_enabled=False)
    # as if an older judge had given every verdict: its version and verdicts differ from today's
    _as_if_judged_by(res.run_dir, "older", flip=True)
    # and as if the run was made before the audited gold existed
    for part in sorted((res.run_dir / "results").glob("*.parquet")):
        rows = pq.read_table(part).to_pylist()
        for r in rows:
            r[C.ALT_GOLD_KIND] = r[C.ALT_GOLD] = r[C.ALT_F1] = r[C.ALT_CORRECT] = None
        pq.write_table(RESULTS.table(rows), part)
    before = {(r[C.HISTORY_ID], r[C.QUESTION_ID]): r for r in read(res.run_dir, "results").to_pylist()}
    assert main(["rejudge", str(res.run_dir), "--report", str(tmp_path / "report")]) == 0
    after = read(res.run_dir, "results").to_pylist()
    judged = [r for r in after if r[C.JUDGE_MODEL] is not None]
    assert judged and all(r[C.JUDGE_VERSION] == JUDGE_VERSION for r in judged)
    for r in judged:
        old = before[(r[C.HISTORY_ID], r[C.QUESTION_ID])]
        assert (r[C.PRIOR_CORRECT], r[C.PRIOR_JUDGE]) == (old[C.CORRECT], "heuristic older")
    assert (tmp_path / "report" / "report.md").is_file()
    # the audited gold filled in, scored and judged
    (audited,) = [r for r in after if r[C.ALT_GOLD] is not None]
    assert (audited[C.QUESTION_ID], audited[C.ALT_GOLD_KIND]) == ("conv-26/q2", "audited")
    assert audited[C.ALT_F1] is not None and audited[C.ALT_CORRECT] is not None
    # a second rejudge finds every verdict made: nothing new, and the first verdict replaced is kept
    assert main(["rejudge", str(res.run_dir)]) == 0
    again = read(res.run_dir, "results").to_pylist()
    assert [r[C.PRIOR_CORRECT] for r in again] == [r[C.PRIOR_CORRECT] for r in after]
    assert read(res.run_dir, "judgments").num_rows == len(judged)
    # a third judge later: the verdict kept is still the first one, not the one it replaces
    _as_if_judged_by(res.run_dir, "middle", flip=False)
    assert main(["rejudge", str(res.run_dir)]) == 0
    third = read(res.run_dir, "results").to_pylist()
    assert [(r[C.PRIOR_CORRECT], r[C.PRIOR_JUDGE]) for r in third] == [
        (r[C.PRIOR_CORRECT], r[C.PRIOR_JUDGE]) for r in after
    ]


def _as_if_judged_by(run_dir: Path, version: str, *, flip: bool) -> None:
    """Give every judged answer the judge version ``version`` (and flip its verdict), and drop the
    judgments: as if another judge had judged the run."""
    for part in sorted((run_dir / "results").glob("*.parquet")):
        rows = pq.read_table(part).to_pylist()
        for r in rows:
            if r[C.JUDGE_MODEL] is not None:
                r[C.JUDGE_VERSION] = version
                if flip:
                    r[C.CORRECT] = not r[C.CORRECT]
        pq.write_table(RESULTS.table(rows), part)
    for part in (run_dir / "judgments").glob("*.parquet"):
        part.unlink()
