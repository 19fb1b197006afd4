"""Synthetic run directories shaped like DESIGN.md's run contract, for tests, docs and `pmem perf report`.

Two generators:

- :func:`write_fixture_run` writes a small but coherent run (about 1,800 result rows): ALFWorld-Revision
  chains/retraction/conflict/two-step and FactConsolidation sh/mh at 6k and 32k, six arms, write logs
  consistent with the answers, per-call request logs, a status dataset with one failed history, and an
  arm that the config lists but that left no rows. One Parquet file per history and dataset.
- :func:`write_large_run` writes a vectorized run of a given size (results, requests, histories) for
  the speed benchmark.

Both write through the run directory contract (:mod:`pmem.rundir`): the typed rows and the datasets'
fixed schemas the runner writes with, so the report is tested on files shaped like a sweep's.

Numbers here are synthetic and say nothing about any memory design.

>>> import tempfile, pathlib
>>> root = write_fixture_run(pathlib.Path(tempfile.mkdtemp()) / "run")
>>> sorted(p.name for p in root.iterdir())
['histories', 'requests', 'results', 'run.toml', 'states', 'writes']
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow.parquet as pq

from pmem.arms import ARM_NAMES
from pmem.rundir import (
    HISTORIES,
    REQUESTS,
    RESULTS,
    WRITES,
    Dataset,
    HistoryRow,
    ParamColumns,
    RequestRow,
    ResultRow,
    RowKeys,
    WriteRow,
)
from pmem.rundir import columns as C

FIXTURE_ARMS = ("pmem", "pmem-iterative", "pmem-no-retention", "raw", "raw-ordered", "long-context")
#: arms whose memory is written by a model (they leave rows in writes/ and extract calls in requests/)
WRITE_ARMS = ("pmem", "pmem-iterative", "pmem-no-retention")
OBJECTS = ("mug", "apple", "book", "pen", "towel", "keychain", "laptop", "vase")
LOCATIONS = (
    "countertop 1",
    "drawer 2",
    "shelf 3",
    "cabinet 4",
    "sinkbasin 1",
    "desk 1",
    "fridge 1",
    "microwave 1",
    "sofa 1",
    "bed 1",
    "garbagecan 1",
    "dresser 1",
)
ENTITIES = (
    "Paris",
    "Lionel Messi",
    "Toyota",
    "Mount Fuji",
    "The Beatles",
    "Nile",
    "Ada Lovelace",
    "Rome",
    "Oxford",
    "Kyoto",
    "Bach",
    "Nokia",
    "Amazon",
    "Tesla",
    "Bordeaux",
    "Everest",
)
RELATIONS = (
    "capital of",
    "plays for",
    "headquartered in",
    "located in",
    "citizen of",
    "founded by",
    "member of",
    "official language",
)
VALUES = (
    "France",
    "Spain",
    "Japan",
    "Brazil",
    "Chelsea",
    "Juventus",
    "Canada",
    "Egypt",
    "Norway",
    "Kenya",
    "Peru",
    "Chile",
    "India",
    "Italy",
    "Germany",
    "Mexico",
    "Portugal",
    "Greece",
)

# Probability that an arm answers correctly: synthetic trends loosely shaped like the paper's.
_CHAIN_P = {
    "pmem": (1.0, 1.0, 1.0, 1.0),
    "pmem-iterative": (1.0, 1.0, 1.0, 0.95),
    "pmem-no-retention": (1.0, 1.0, 1.0, 1.0),
    "raw": (1.0, 0.7, 0.45, 0.25),
    "raw-ordered": (1.0, 0.95, 0.8, 0.65),
    "long-context": (1.0, 0.9, 0.7, 0.5),
}
_FC_P = {
    "pmem": (0.95, 0.4),
    "pmem-iterative": (0.95, 0.55),
    "pmem-no-retention": (0.9, 0.35),
    "raw": (0.7, 0.15),
    "raw-ordered": (0.92, 0.12),
    "long-context": (0.35, 0.04),
}
_READ_CHARS = {
    "pmem": 30,
    "pmem-iterative": 45,
    "pmem-no-retention": 30,
    "raw": 610,
    "raw-ordered": 640,
    "long-context": 2400,
}


@dataclass
class _Tables:
    results: list[ResultRow] = field(default_factory=list)
    writes: list[WriteRow] = field(default_factory=list)
    requests: list[RequestRow] = field(default_factory=list)
    histories: list[HistoryRow] = field(default_factory=list)


def _params(benchmark: str, subset: str, params: dict[str, Any]) -> ParamColumns:
    """The parameter columns as the runner fills them (FactConsolidation's length from its subset name)."""
    length = params.get(C.LENGTH)
    if length is None and benchmark == "factconsolidation" and "_" in subset:
        length = subset.split("_", 1)[1]
    return ParamColumns(
        L=params.get(C.L), d=params.get(C.D), length=length, params=json.dumps(params, sort_keys=True)
    )


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'


def run_toml(run_id: str, agent_backend: str, arms: tuple[str, ...], fc_arms: tuple[str, ...]) -> str:
    agent_model = "heuristic" if agent_backend == "heuristic" else "Qwen/Qwen3-4B-Instruct-2507"
    lines = [
        f"run_id = {_toml_value(run_id)}",
        'hash = "sha256:5f1c0ffee0ddba11"',
        'created = "2026-11-29T12:00:00Z"',
        "",
        "[versions]",
        'pmem = "0.1.0"',
        f'polars = "{pl.__version__}"',
        'python = "3.11"',
        "",
        "[config]",
        'name = "fixture"',
        f"arms = {_toml_value(list(arms))}",
        "",
        "[config.models.agent]",
        f"backend = {_toml_value(agent_backend)}",
        f"model = {_toml_value(agent_model)}",
        "",
        "[config.models.embedder]",
        'backend = "hashing"',
        'model = "hashing-256"',
        "",
        "[config.models.judge]",
        'backend = "heuristic"',
        'model = "heuristic"',
        "",
        "[[config.benchmarks]]",
        'name = "alfworld-revision"',
        'subsets = ["chains", "retraction", "conflict", "two-step"]',
        "L = [1, 2, 4, 8]",
        "d = [0, 32]",
        "",
        "[[config.benchmarks]]",
        'name = "factconsolidation"',
        'subsets = ["sh_6k", "mh_6k", "sh_32k", "mh_32k"]',
        f"arms = {_toml_value(list(fc_arms))}",
        "",
    ]
    return "\n".join(lines)


class _Gen:
    def __init__(
        self, run_id: str, rng: random.Random, arms: tuple[str, ...], audit_columns: bool, agent_model: str
    ) -> None:
        self.run_id = run_id
        self.rng = rng
        self.arms = arms
        self.audit_columns = audit_columns
        self.model = agent_model
        self.t = _Tables()
        #: (benchmark, subset) of the histories being generated
        self.where = ("", "")

    # -- helpers -----------------------------------------------------------------------------------
    def keys(self, h: str, arm: str) -> RowKeys:
        bench, subset = self.where
        return RowKeys(
            run_id=self.run_id,
            unit_id=f"{h}/{arm}",
            benchmark=bench,
            subset=subset,
            history_id=h,
            arm=arm,
            model=self.model,
        )

    def result(
        self,
        h: str,
        arm: str,
        qid: str,
        qtype: str,
        question: str,
        prediction: str,
        gold: str,
        stale: bool | None,
        params: dict[str, Any],
        audit: dict[str, Any] | None = None,
    ) -> None:
        chars = max(1, int(self.rng.gauss(_READ_CHARS[arm], _READ_CHARS[arm] * 0.05)))
        self.t.results.append(
            ResultRow(
                **self.keys(h, arm).columns(),
                question_id=qid,
                question_type=qtype,
                question=question,
                prediction=prediction,
                gold=gold,
                correct=prediction.strip().lower() == gold.strip().lower(),
                stale=stale,
                read_tokens=chars // 4 + 1,
                read_chars=chars,
                **_params(*self.where, params).columns(),
                **(audit or {}),
            )
        )
        self.request(h, arm, "answer", chars // 4 + 60, 6)

    def request(
        self, h: str, arm: str, purpose: str, prompt: int, completion: int, error: str | None = None
    ) -> None:
        self.t.requests.append(
            RequestRow(
                **self.keys(h, arm).request_columns(),
                purpose=purpose,
                model=self.model,
                prompt_tokens=prompt,
                completion_tokens=completion,
                cached=False,
                latency_s=round(self.rng.uniform(0.001, 0.02), 4),
                error=error,
                # a served model's server answered every call (a failed one with an error status);
                # the in-process heuristic has no server
                http_status=None if self.model == "heuristic" else (200 if error is None else 500),
            )
        )

    def write(
        self,
        h: str,
        arm: str,
        op: str,
        key: str | None,
        value: str | None,
        applied: bool = True,
        reason: str | None = None,
    ) -> None:
        seq = sum(1 for w in self.t.writes if w.history_id == h and w.arm == arm)
        self.t.writes.append(
            WriteRow(
                **self.keys(h, arm).columns(),
                seq=seq,
                op=op,
                key=key,
                value=value,
                applied=applied,
                reason=reason,
            )
        )
        if op != "noop":
            self.request(h, arm, "extract", 140 + (len(value or "") // 4), 18)

    def status(
        self,
        h: str,
        arm: str,
        n_events: int,
        n_questions: int,
        params: dict[str, Any],
        ok: bool = True,
        error: str | None = None,
    ) -> None:
        cells = len({w.key for w in self.t.writes if w.history_id == h and w.arm == arm})
        self.t.histories.append(
            HistoryRow(
                **self.keys(h, arm).columns(),
                status="complete" if ok else "failed",
                error=error,
                attempt=0,
                wall_s=round(self.rng.uniform(0.05, 0.5) * (1 + n_events / 10), 3),
                state_bytes=900 + 160 * cells if arm in WRITE_ARMS else None,
                n_events=n_events,
                n_questions=n_questions,
                **_params(*self.where, params).columns(),
            )
        )

    def pick(self, p: float) -> bool:
        return self.rng.random() < p

    # -- ALFWorld-Revision -------------------------------------------------------------------------
    def chains(self, n: int) -> None:
        self.where = ("alfworld-revision", "chains")
        for li, L in enumerate((1, 2, 4, 8)):
            for i in range(n):
                h = f"alf-chains-L{L}-{i:03d}"
                obj = OBJECTS[i % len(OBJECTS)]
                locs = self.rng.sample(LOCATIONS, L + 1)
                for arm in self.arms:
                    if arm in WRITE_ARMS:
                        for loc in locs:
                            self.write(h, arm, "accept", f"{obj}.location", loc)
                    if self.pick(_CHAIN_P[arm][li]):
                        pred = locs[-1]
                    elif self.pick(0.7):
                        pred = self.rng.choice(locs[:-1])
                    else:
                        pred = self.rng.choice([x for x in LOCATIONS if x not in locs])
                    stale = pred != locs[-1] and pred in locs[:-1]
                    self.result(
                        h,
                        arm,
                        f"{h}-q0",
                        "current",
                        f"Where is the {obj} now?",
                        pred,
                        locs[-1],
                        stale,
                        {C.L: L},
                    )
                    self.status(h, arm, L + 1, 1, {C.L: L})

    def retraction(self, n: int) -> None:
        p_after = {
            "pmem": 1.0,
            "pmem-iterative": 1.0,
            "pmem-no-retention": 0.0,
            "raw": 0.95,
            "raw-ordered": 0.97,
            "long-context": 0.8,
        }
        self.where = ("alfworld-revision", "retraction")
        for d in (0, 32):
            for i in range(n):
                h = f"alf-retraction-d{d}-{i:03d}"
                obj = OBJECTS[(i + 3) % len(OBJECTS)]
                v1, v2, *_ = self.rng.sample(LOCATIONS, 3)
                for arm in self.arms:
                    if arm in WRITE_ARMS:
                        self.write(h, arm, "accept", f"{obj}.location", v1)
                        self.write(h, arm, "accept", f"{obj}.location", v2)
                        for j in range(min(d, 4)):
                            self.write(h, arm, "accept", f"{OBJECTS[j]}.location", LOCATIONS[j])
                        self.write(h, arm, "revoke", f"{obj}.location", None)
                    committed = self.pick(0.9 if arm == "long-context" else 1.0)
                    before = v2 if committed else v1
                    self.result(
                        h,
                        arm,
                        f"{h}-q0",
                        "before_retraction",
                        f"Where is the {obj} now?",
                        before,
                        v2,
                        None,
                        {C.D: d},
                    )
                    if arm == "pmem-no-retention":
                        after = ""
                    elif self.pick(p_after[arm]):
                        after = v1
                    else:
                        after = v2 if self.pick(0.8) else ""
                    self.result(
                        h,
                        arm,
                        f"{h}-q1",
                        "after_retraction",
                        f"Where is the {obj} now?",
                        after,
                        v1,
                        after == v2,
                        {C.D: d},
                    )
                    self.status(h, arm, 3 + d, 2, {C.D: d})

    def conflict(self, n: int) -> None:
        p_post = {
            "pmem": 1.0,
            "pmem-iterative": 1.0,
            "pmem-no-retention": 0.95,
            "raw": 0.55,
            "raw-ordered": 0.7,
            "long-context": 0.5,
        }
        self.where = ("alfworld-revision", "conflict")
        for i in range(n):
            h = f"alf-conflict-{i:03d}"
            obj = OBJECTS[(i + 5) % len(OBJECTS)]
            a, b = self.rng.sample(LOCATIONS, 2)
            flag = f"conflict: {a} or {b}"
            for arm in self.arms:
                if arm in WRITE_ARMS:
                    self.write(h, arm, "accept", f"{obj}.location", a)
                    self.write(h, arm, "contest", f"{obj}.location", b)
                    self.write(h, arm, "resolve", f"{obj}.location", b)
                pre = flag if self.pick(0.95 if arm.startswith("pmem") else 0.6) else a
                self.result(h, arm, f"{h}-q0", "before_settle", f"Where is the {obj}?", pre, flag, None, {})
                post = b if self.pick(p_post[arm]) else a
                self.result(
                    h, arm, f"{h}-q1", "after_settle", f"Where is the {obj} now?", post, b, post == a, {}
                )
                self.status(h, arm, 11, 2, {})

    def two_step(self, n: int) -> None:
        p = {
            "pmem": 0.92,
            "pmem-iterative": 0.92,
            "pmem-no-retention": 0.92,
            "raw": 0.96,
            "raw-ordered": 0.96,
            "long-context": 0.9,
        }
        self.where = ("alfworld-revision", "two-step")
        for i in range(n):
            h = f"alf-two-step-{i:03d}"
            obj = OBJECTS[(i + 1) % len(OBJECTS)]
            a, b = self.rng.sample(LOCATIONS, 2)
            for arm in self.arms:
                if arm in WRITE_ARMS:
                    self.write(h, arm, "accept", f"{obj}.location", a)
                    self.write(h, arm, "accept", f"{obj}.location", b)
                pred = b if self.pick(p[arm]) else a
                self.result(h, arm, f"{h}-q0", "current", f"Where is the {obj} now?", pred, b, pred == a, {})
                self.status(h, arm, 2, 1, {})

    # -- FactConsolidation -------------------------------------------------------------------------
    def factconsolidation(
        self, n: int, q: int, fc_arms: tuple[str, ...], failed: tuple[str, str] | None
    ) -> None:
        for length in ("6k", "32k"):
            for hop in ("sh", "mh"):
                subset = f"{hop}_{length}"
                self.where = ("factconsolidation", subset)
                for i in range(n):
                    h = f"fc-{subset}-{i:03d}"
                    facts = self._fc_stream(q)
                    for arm in fc_arms:
                        if failed == (h, arm):
                            # the calls made before the failure are logged, but the history is not complete
                            self.request(h, arm, "answer", 17210, 0, error="ContextWindowExceeded")
                            self.status(
                                h,
                                arm,
                                len(facts),
                                q,
                                {},
                                ok=False,
                                # as a runner records one: the traceback, the exception last
                                error=(
                                    "Traceback (most recent call last):\n"
                                    '  File "pmem/runner/_execute.py", line 346, in run_unit\n'
                                    "ContextWindowExceeded: prompt of 17,210 tokens > 16,384"
                                ),
                            )
                            continue
                        cells = self._fc_writes(h, arm, facts) if arm in WRITE_ARMS else None
                        self._fc_answers(h, arm, subset, hop, facts, cells)
                        self.status(h, arm, sum(len(f[1]) for f in facts), q, {})

    def _fc_stream(self, q: int) -> list[tuple[str, list[str], bool, bool]]:
        """Per question: (key, value chain, stale-sibling fragmentation, extraction miss)."""
        out = []
        pairs = self.rng.sample([(e, r) for e in ENTITIES for r in RELATIONS], q)
        for e, r in pairs:
            chain = self.rng.sample(VALUES, self.rng.choice((1, 1, 2, 3)))
            fragment = len(chain) > 1 and self.pick(0.15)
            miss = self.pick(0.04)
            out.append((f"{e}.{r}", chain, fragment, miss))
        return out

    def _fc_writes(self, h: str, arm: str, facts: list[tuple[str, list[str], bool, bool]]) -> dict[str, str]:
        cells: dict[str, str] = {}
        for key, chain, fragment, miss in facts:
            for j, value in enumerate(chain):
                last = j == len(chain) - 1
                if last and miss:
                    continue
                k = f"{key} (variant)" if (last and fragment) else key
                self.write(h, arm, "accept", k, value)
                cells[k] = value
        return cells

    def _fc_answers(
        self,
        h: str,
        arm: str,
        subset: str,
        hop: str,
        facts: list[tuple[str, list[str], bool, bool]],
        cells: dict[str, str] | None,
    ) -> None:
        p = _FC_P[arm][0 if hop == "sh" else 1]
        for j, (key, chain, fragment, miss) in enumerate(facts):
            gold = chain[-1]
            identifiable = hop == "sh" and len(chain) > 1
            in_active = cells is not None and gold in cells.values()
            ok = False if cells is not None and not in_active else self.pick(p * (0.85 if fragment else 1.0))
            if ok:
                pred = gold
            elif len(chain) > 1 and self.pick(0.6):
                pred = chain[-2]
            else:
                pred = self.rng.choice([v for v in VALUES if v not in chain])
            stale = (pred != gold and pred in chain[:-1]) if identifiable else None
            e, r = key.split(".", 1)
            audit: dict[str, Any] = {}
            if self.audit_columns and cells is not None:
                audit[C.AUDIT_GOLD_IN_ACTIVE_CELL] = in_active
                audit[C.AUDIT_GOLD_IN_MATCHING_CELL] = cells.get(key) == gold
                audit[C.AUDIT_STALE_SIBLING] = (fragment and not miss) if len(chain) > 1 else None
            if arm == "pmem-iterative" and hop == "mh":
                self.request(h, arm, "lookup", 220, 12)
            self.result(
                h,
                arm,
                f"{h}-q{j:02d}",
                "single-hop" if hop == "sh" else "multi-hop",
                f"What is the {r} of {e}?",
                pred,
                gold,
                stale,
                {},
                audit,
            )


def write_fixture_run(
    root: str | Path,
    *,
    seed: int = 7,
    agent_backend: str = "heuristic",
    audit_columns: bool = True,
    n_alf: int = 12,
    n_fc: int = 2,
    fc_questions: int = 25,
    arms: tuple[str, ...] = FIXTURE_ARMS,
    run_id: str | None = None,
    request_context: bool = True,
) -> Path:
    """Write a small coherent run directory at ``root`` and return it.

    The config lists ``bitemporal`` for FactConsolidation, which leaves no rows (a missing arm), and one
    FactConsolidation history fails for ``long-context`` (a partial cell; its one logged call must not be
    counted). ``audit_columns`` fills the write-path audit of the arms that keep facts, as the runner does
    (False: left null, as by arms without an audit). ``request_context=False`` leaves ``benchmark`` and
    ``subset`` out of the request files, as runners before the run directory contract did: the report
    then attributes each call through its (history, arm).
    """
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    run_id = run_id or f"fixture-{seed}"
    model = "heuristic" if agent_backend == "heuristic" else "Qwen/Qwen3-4B-Instruct-2507"
    g = _Gen(run_id, random.Random(seed), arms, audit_columns, model)
    g.chains(n_alf)
    g.retraction(n_alf)
    g.conflict(n_alf)
    g.two_step(n_alf)
    fc_arms = (*arms, "bitemporal")
    failed = ("fc-sh_32k-001", "long-context") if "long-context" in arms and n_fc > 1 else None
    g.factconsolidation(n_fc, fc_questions, tuple(a for a in fc_arms if a in arms), failed)
    (root / "run.toml").write_text(run_toml(run_id, agent_backend, arms, fc_arms), encoding="utf-8")
    _write_per_history(root, RESULTS, g.t.results)
    _write_per_history(root, WRITES, g.t.writes)
    _write_per_history(root, REQUESTS, g.t.requests, drop=() if request_context else (C.BENCHMARK, C.SUBSET))
    _write_per_history(root, HISTORIES, g.t.histories)
    states = root / "states"
    states.mkdir(exist_ok=True)
    return root


def _write_per_history(
    root: Path, dataset: Dataset[Any], rows: list[Any], drop: tuple[str, ...] = ()
) -> None:
    """One file per history (all its arms) with the dataset's fixed schema; ``drop``: columns left out."""
    directory = root / dataset.name
    directory.mkdir(parents=True, exist_ok=True)
    by_history: dict[str, list[Any]] = {}
    for r in rows:
        by_history.setdefault(r.history_id, []).append(r)
    for h, group in by_history.items():
        pq.write_table(dataset.table(group).drop_columns(list(drop)), directory / f"{h}.parquet")


# -- large vectorized run (speed benchmark) ------------------------------------------------------------

_BIG_ARMS = tuple(ARM_NAMES)


def write_large_run(
    root: str | Path,
    *,
    n_results: int = 1_000_000,
    n_requests: int = 5_000_000,
    seed: int = 0,
    files: int = 16,
    request_context: bool = True,
) -> Path:
    """A vectorized synthetic run with about ``n_results`` result rows and ``n_requests`` request rows.

    ``request_context=False`` leaves ``benchmark``/``subset`` out of the request files (see the report's
    write-cost path).
    """
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    arms = np.array(_BIG_ARMS)
    n_arms = len(arms)
    # (benchmark, subset, params, questions per history, share of rows)
    blocks: list[tuple[str, str, dict[str, int], tuple[str, ...], float]] = []
    for L in (1, 2, 4, 8):
        blocks.append(("alfworld-revision", "chains", {C.L: L}, ("current",), 0.1))
    for d in (0, 32):
        blocks.append(
            ("alfworld-revision", "retraction", {C.D: d}, ("before_retraction", "after_retraction"), 0.1)
        )
    blocks.append(("alfworld-revision", "conflict", {}, ("before_settle", "after_settle"), 0.1))
    blocks.append(("alfworld-revision", "two-step", {}, ("current",), 0.05))
    for hop in ("sh", "mh"):
        for length in ("6k", "32k", "64k", "262k"):
            blocks.append(
                (
                    "factconsolidation",
                    f"{hop}_{length}",
                    {},
                    tuple(["single-hop" if hop == "sh" else "multi-hop"] * 100),
                    0.25 / 8,
                )
            )
    frames = []
    status_frames = []
    for bi, (bench, subset, params, qtypes, share) in enumerate(blocks):
        q = len(qtypes)
        n_hist = max(2, math.ceil(n_results * share / (n_arms * q)))
        rows = n_hist * n_arms * q
        hist = np.repeat(np.arange(n_hist), n_arms * q)
        arm_idx = np.tile(np.repeat(np.arange(n_arms), q), n_hist)
        qi = np.tile(np.arange(q), n_hist * n_arms)
        base = 0.3 + 0.65 * (arm_idx % 5) / 4
        correct = rng.random(rows) < base
        stale_def = rng.random(rows) < 0.6
        stale_val = (~correct) & (rng.random(rows) < 0.6)
        tokens = (10 + 150 * (arm_idx % 7) + rng.integers(0, 20, rows)).astype(np.int64)
        pcols = _params(bench, subset, params)
        df = (
            pl.DataFrame(
                {
                    C.RUN_ID: np.full(rows, "perf"),
                    C.BENCHMARK: np.full(rows, bench),
                    C.SUBSET: np.full(rows, subset),
                    "hist": hist,
                    C.ARM: arms[arm_idx],
                    C.MODEL: np.full(rows, "heuristic"),
                    "qi": qi,
                    C.QUESTION_TYPE: np.array(qtypes)[qi],
                    C.CORRECT: correct,
                    C.STALE: pl.Series(stale_val).set(pl.Series(~stale_def), None),
                    C.READ_TOKENS: tokens,
                    C.READ_CHARS: tokens * 4,
                }
            )
            .with_columns(
                pl.format("{}-{}-{}", pl.lit(f"b{bi}"), pl.lit(subset), pl.col("hist")).alias(C.HISTORY_ID),
            )
            .with_columns(
                pl.format("{}/{}", pl.col(C.HISTORY_ID), pl.col(C.ARM)).alias(C.UNIT_ID),
                pl.format("{}-q{}", pl.col(C.HISTORY_ID), pl.col("qi")).alias(C.QUESTION_ID),
                pl.lit("Where is it now?").alias(C.QUESTION),
                pl.when(pl.col(C.CORRECT))
                .then(pl.lit("drawer 2"))
                .otherwise(pl.lit("shelf 3"))
                .alias(C.PREDICTION),
                pl.lit("drawer 2").alias(C.GOLD),
                *[
                    pl.lit(v, dtype=t).alias(k)
                    for k, v in pcols.columns().items()
                    for t in [pl.Int64 if k in (C.L, C.D) else pl.String]
                ],
            )
            .drop("hist", "qi")
        )
        frames.append(df)
        status_frames.append(
            df.select(
                C.RUN_ID, C.UNIT_ID, C.BENCHMARK, C.SUBSET, C.HISTORY_ID, C.ARM, C.MODEL, *pcols.columns()
            ).unique()
        )
    results = pl.concat(frames, how="diagonal_relaxed")
    status = pl.concat(status_frames).with_columns(
        pl.lit("complete").alias(C.STATUS),
        pl.lit(None, dtype=pl.String).alias(C.ERROR),
        pl.lit(0, dtype=pl.Int64).alias(C.ATTEMPT),
        pl.lit(None, dtype=pl.Int64).alias(C.N_EVENTS),
        pl.lit(None, dtype=pl.Int64).alias(C.N_QUESTIONS),
        pl.lit(0.25).alias(C.WALL_S),
        pl.lit(4096, dtype=pl.Int64).alias(C.STATE_BYTES),
    )
    pairs = status.select(C.RUN_ID, C.UNIT_ID, C.BENCHMARK, C.SUBSET, C.HISTORY_ID, C.ARM, C.MODEL)
    pick = rng.integers(0, pairs.height, n_requests)
    purposes = np.array(["extract", "answer", "identity", "lookup", "judge"])
    read_only = ["no-memory", "long-context", "raw", "raw-ordered", "chunks"]
    requests = (
        pairs[pick]
        .rename({C.MODEL: C.AGENT_MODEL})
        .with_columns(
            pl.Series(C.PURPOSE, purposes[rng.choice(5, n_requests, p=[0.55, 0.3, 0.05, 0.05, 0.05])]),
        )
        .with_columns(
            # read-time arms make no write calls
            pl.when(pl.col(C.ARM).is_in(read_only) & pl.col(C.PURPOSE).is_in(["extract", "identity"]))
            .then(pl.lit("answer"))
            .otherwise(pl.col(C.PURPOSE))
            .alias(C.PURPOSE),
            pl.lit("heuristic").alias(C.MODEL),
            pl.Series(C.PROMPT_TOKENS, rng.integers(50, 600, n_requests)),
            pl.Series(C.COMPLETION_TOKENS, rng.integers(1, 40, n_requests)),
            pl.lit(False).alias(C.CACHED),
            pl.Series(C.LATENCY_S, rng.random(n_requests) * 0.01),
            pl.lit(None, dtype=pl.String).alias(C.ERROR),
        )
    )
    drop = () if request_context else (C.BENCHMARK, C.SUBSET)
    for dataset, df, leave_out in (
        (RESULTS, results, ()),
        (REQUESTS, requests, drop),
        (HISTORIES, status, ()),
    ):
        table = dataset.conform(df.to_arrow()).drop_columns(list(leave_out))
        out_dir = root / dataset.name
        out_dir.mkdir(parents=True, exist_ok=True)
        step = -(-table.num_rows // files)
        for i in range(files):
            part = table.slice(i * step, step)
            if part.num_rows:
                pq.write_table(part, out_dir / f"part-{i:04d}.parquet")
    (root / "run.toml").write_text(run_toml("perf", "heuristic", _BIG_ARMS, _BIG_ARMS), encoding="utf-8")
    return root
