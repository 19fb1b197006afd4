"""The sweep driver: expand a config into units, hand them to runner actors, survive their deaths.

The driver keeps a queue of units (history x arm x agent) and feeds each runner a bounded number at a
time, so work balances across runners and a dead runner loses only what it held. When a runner dies,
its staging is recovered (committed batches rolled forward, the rest deleted) and its unfinished
units are queued again on a fresh runner. Nothing the driver holds is needed for resume: a re-run
reads the commit records and skips complete histories.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from pmem._atomic import atomic_write_bytes
from pmem._lock import hold_exclusive
from pmem.arms import NEEDS_A_MODEL, resolve_arm
from pmem.memory.prompts import prompt_hashes
from pmem.rundir import (
    LOCK,
    PLAN,
    PROGRESS_LOG,
    RUN_TOML,
    SUMMARY,
    PlanCell,
    failed_history_file,
)
from pmem.runner._connect import connect
from pmem.runner._execute import Unit
from pmem.runner._identity import config_hash, run_id_for, run_toml, unit_id, write_run_toml
from pmem.runner._judge import judge_pass
from pmem.runner._progress import LogFile, Progress, terminal_width, wrap_lines
from pmem.runner._schedule import LIVE_POLL_S, LivePoll, RunnerPool, Scheduler, note_loop_stats
from pmem.runner._store import RunStore

if TYPE_CHECKING:
    from pmem.bench import History
    from pmem.runner._config import SweepSpec


@dataclass
class SweepResult:
    run_dir: Path
    run_id: str
    total: int
    skipped: int
    completed: int
    failed: int
    redone: int
    wall_s: float
    failures: list[dict[str, Any]] = field(default_factory=list)
    judged: int = 0
    calls: int = 0
    tokens: int = 0
    #: seconds from runners ready to the last commit (0 when nothing ran)
    exec_s: float = 0.0
    #: the backend of each agent model (``heuristic``: rules, no LLM; the summary says so)
    agents: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.failed == 0


@dataclass
class Plan:
    """What a sweep will do: the run directory, its id, and every unit with its history."""

    spec: SweepSpec
    store: RunStore
    run_id: str
    digest: str
    prompts: dict[str, str]
    units: list[Unit]
    histories: dict[str, History]  # history key -> History
    unit_history: dict[str, str]  # uid -> history key
    totals: dict[tuple[str, str], int]
    #: (benchmark, subset, arm, agent model) -> (histories, why not): cells planned as not run
    not_run: dict[tuple[str, str, str, str], tuple[int, str]] = field(default_factory=dict)


def resolve_out(spec: SweepSpec, out: str | os.PathLike[str] | None) -> Path:
    """``--out``, else ``$PMEM_OUT``, else ``[run] out`` (relative to the working directory)."""
    return Path(out or os.environ.get("PMEM_OUT") or spec.run.out).expanduser().resolve()


def plan_sweep(
    spec: SweepSpec, *, out: str | os.PathLike[str] | None = None, limit: int | None = None
) -> Plan:
    prompts = prompt_hashes()
    digest = config_hash(spec, prompts)
    limit = limit or spec.run.limit
    run_id = run_id_for(spec, digest, limit)
    store = RunStore(resolve_out(spec, out) / run_id)

    for arm in sorted({a for t in spec.targets() for a in t.arms}):
        resolve_arm(arm)  # an arm that does not resolve (a plugin that does not import) fails the sweep now

    not_run: dict[tuple[str, str, str, str], tuple[int, str]] = {}
    units: list[Unit] = []
    histories: dict[str, History] = {}
    unit_history: dict[str, str] = {}
    totals: dict[tuple[str, str], int] = defaultdict(int)
    seen: set[str] = set()
    for target in spec.targets():
        if limit is not None:
            target = type(target)(
                target.benchmark,
                target.subset,
                target.params,
                target.arms,
                min(limit, target.limit) if target.limit else limit,
            )
        try:
            hs = list(target.histories())
        except Exception as exc:
            msg = f"{spec.source}: benchmark {target.label}: cannot load histories: {exc}"
            raise RuntimeError(msg) from exc
        for h in hs:
            hkey = f"{target.label}|{h.id}"
            histories[hkey] = h
            for agent in spec.agents:
                for arm in target.arms:
                    if agent.backend == "heuristic" and resolve_arm(arm).needs_model:
                        cell = (target.benchmark, h.subset or target.subset, arm, agent.model_id)
                        not_run[cell] = (not_run.get(cell, (0, ""))[0] + 1, NEEDS_A_MODEL)
                        continue
                    uid = unit_id(target, h.id, arm, agent.model_id)
                    if uid in seen:
                        msg = f"{spec.source}: {target.label}: history id {h.id!r} occurs twice"
                        raise RuntimeError(msg)
                    seen.add(uid)
                    u = Unit(
                        uid=uid,
                        benchmark=target.benchmark,
                        subset=h.subset or target.subset,
                        history_id=h.id,
                        arm=arm,
                        model=agent.model_id,
                        params=target.params,
                    )
                    units.append(u)
                    unit_history[uid] = hkey
                    totals[u.group] += 1
    return Plan(spec, store, run_id, digest, prompts, units, histories, unit_history, dict(totals), not_run)


def execute(
    plan: Plan, *, runners: int | None = None, progress: Progress, log: Any
) -> tuple[list[dict[str, Any]], int]:
    """Run every pending unit of ``plan``; returns (summaries of units run, units redone after deaths)."""
    store = plan.store
    done = store.completed()
    pending = [u for u in plan.units if u.uid not in done]
    if not pending:
        return [], 0
    pool = RunnerPool(plan, runners if runners is not None else plan.spec.run.runners, log)
    progress.restart_clock()
    progress.detail(
        f"[pmem sweep] {len(pending)} histories to run on {pool.n} runner(s) "
        f"({plan.spec.run.in_flight} in flight each)"
    )
    schedule = Scheduler(plan, pending, pool, progress)
    interrupted = False
    live = LivePoll(min(progress.interval, LIVE_POLL_S))
    logs_kept = time.monotonic()
    try:
        while schedule.busy:
            if time.monotonic() - logs_kept >= _LOG_SAVE_S:
                pool.keep_logs()
                logs_kept = time.monotonic()
            schedule.fill()
            ready = schedule.wait(min(1.0, progress.interval))
            live.poll(pool, progress)
            if ready:
                schedule.collect(ready)
            else:
                progress.tick()
    except KeyboardInterrupt:
        interrupted = True
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the cleanup short
        raise
    finally:
        progress.exec_s = time.monotonic() - progress.t0
        if not interrupted:  # after Ctrl-C the user is waiting: stop at once
            note_loop_stats(pool, progress)
        pool.stop()
    store.recover()  # every unit has returned, so staging holds only empty runner folders
    return schedule.summaries, schedule.redone


#: seconds between two saves of the hosted servers' logs into the run's logs/ (a kill loses at most these)
_LOG_SAVE_S = 120.0


class SweepInterrupted(RuntimeError):
    """The sweep was stopped (Ctrl-C); committed histories are kept. The message says how to resume."""


def check_runners(runners: int | None) -> None:
    if runners is not None and (isinstance(runners, bool) or not isinstance(runners, int) or runners < 1):
        msg = f"--runners must be a whole number >= 1, got {runners!r}"
        raise ValueError(msg)


def prepare_out(path: Path) -> list[Path]:
    """Create ``path`` (the run directory) and its parents; returns the folders this call created.

    Fails with one line naming the path when it is a file, lies under a file, or cannot be written.
    """
    created: list[Path] = []
    for p in [*reversed(path.parents), path]:
        if p.exists():
            if not p.is_dir():
                msg = f"{p} is a file, not a folder: choose another --out"
                raise ValueError(msg)
            continue
        try:
            p.mkdir()
        except OSError as exc:
            _remove_created(created)
            msg = f"cannot create {p}: {exc.strerror or exc}"
            raise ValueError(msg) from None
        created.append(p)
    if not os.access(path, os.W_OK | os.X_OK):
        _remove_created(created)
        msg = f"{path} is not writable: choose another --out"
        raise ValueError(msg)
    return created


def _remove_created(created: list[Path]) -> None:
    """Undo :func:`prepare_out` when the sweep stops before any work: no empty run folder is left behind."""
    import shutil

    for p in reversed(created):
        shutil.rmtree(p, ignore_errors=True)


def planned_cells(plan: Plan) -> list[dict[str, Any]]:
    """Histories planned per (benchmark, subset, arm, agent model): what a complete run holds."""
    counts: Counter[tuple[str, str, str, str]] = Counter(
        (u.benchmark, u.subset, u.arm, u.model) for u in plan.units
    )
    cells = [PlanCell(b, s, a, m, histories=n) for (b, s, a, m), n in sorted(counts.items())]
    # an arm that cannot run with this agent: its histories, none planned, and why
    cells += [
        PlanCell(b, s, a, m, histories=0, not_run=why, skipped=n)
        for (b, s, a, m), (n, why) in sorted(plan.not_run.items())
    ]
    return [c.to_json() for c in cells]


def run_sweep(
    spec: SweepSpec,
    *,
    out: str | os.PathLike[str] | None = None,
    address: str | None = None,
    limit: int | None = None,
    predict_only: bool | None = None,
    runners: int | None = None,
    stream: TextIO | None = None,
    progress_enabled: bool = True,
    connect_timeout_s: float | None = None,
    verbose: bool = False,
) -> SweepResult:
    """Run (or resume) a sweep; returns its summary.

    Raises ``ValueError``/``RuntimeError`` for config, data and path errors (before anything starts),
    :class:`~pmem.runner._connect.ClusterUnreachable` when a named cluster does not answer, and
    :class:`SweepInterrupted` on Ctrl-C (after keeping every committed history).

    Progress goes to ``stream`` (stderr) as one line that fits the terminal, unless ``progress_enabled``
    is false; ``verbose`` adds the details (counts per subset and arm, runner stats). Both, and every
    note, are also appended to the run's progress log (:data:`pmem.rundir.PROGRESS_LOG`).
    """

    t0 = time.monotonic()
    stream = stream or sys.stderr
    # the run's progress log: set once the run directory is locked (before, it may not be this run's)
    log_file = LogFile(warn=stream)

    def log(text: str) -> None:
        for line in wrap_lines([text], terminal_width(stream)):  # the log file keeps it on one line
            print(line, file=stream, flush=True)
        log_file.write([text])

    check_runners(runners)
    timeout_s = connect_timeout_s if connect_timeout_s is not None else spec.run.connect_timeout_s
    if not timeout_s > 0:
        msg = f"--connect-timeout must be > 0 seconds, got {timeout_s!r}"
        raise ValueError(msg)
    plan = plan_sweep(spec, out=out, limit=limit)
    store = plan.store
    created = prepare_out(store.root)
    started = False
    lock = None
    try:
        store.ensure()
        lock = hold_exclusive(store.root / LOCK, f"{store.root} (a `pmem sweep` run directory)")
        log_file.path = store.root / PROGRESS_LOG
        unit_ids = {u.uid for u in plan.units}
        if unit_ids - store.completed():
            started = connect(address, timeout_s=timeout_s)
            _kill_orphans(plan.run_id, log)
        created = []  # from here on the run folder holds the user's work: never removed
        store.recover(verify=True)  # no runner of this run is alive: finish or discard what a crash left
        for problem in store.damaged:
            log(f"[pmem sweep] damaged batch dropped, its histories run again: {problem}")
        if unit_ids - store.completed() and not started:
            # recovery dropped a batch: there is work after all
            started = connect(address, timeout_s=timeout_s)
            _kill_orphans(plan.run_id, log)
        return _run_planned(
            plan,
            spec,
            runners,
            predict_only,
            Progress(
                plan.totals,
                _already_complete(plan),
                interval=spec.run.progress_s,
                stream=stream,
                enabled=progress_enabled,
                verbose=verbose,
                log=log_file,
            ),
            log,
            t0,
        )
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the cleanup short
        with contextlib.suppress(Exception):
            store.recover()
        done = len(store.completed() & {u.uid for u in plan.units}) if store.root.is_dir() else 0
        msg = (
            f"interrupted: {done} of {len(plan.units)} histories are committed in {store.root}; "
            "run the same command again to resume"
        )
        raise SweepInterrupted(msg) from None
    finally:
        _remove_created(created)
        if started:
            import ray

            with contextlib.suppress(Exception):
                ray.shutdown()
        if lock is not None:
            lock.release()


def _run_planned(
    plan: Plan,
    spec: SweepSpec,
    runners: int | None,
    predict_only: bool | None,
    progress: Progress,
    log: Any,
    t0: float,
) -> SweepResult:
    store = plan.store
    model_ids = {
        "agents": [a.model_id for a in spec.agents],
        "embedder": spec.embedder.model_id,
        "judge": spec.judge.model_id if spec.judge else None,
    }
    write_run_toml(
        store.root / RUN_TOML,
        run_toml(
            spec,
            run_id=plan.run_id,
            digest=plan.digest,
            prompts=plan.prompts,
            model_ids=model_ids,
            source=spec.source,
        ),
    )
    atomic_write_bytes(
        store.root / PLAN,
        json.dumps({"run_id": plan.run_id, "cells": planned_cells(plan)}, indent=1).encode(),
    )

    skipped = progress.n_done  # nothing ran yet: the histories earlier invocations committed
    progress.note(
        f"[pmem sweep] run {plan.run_id}: {len(plan.units)} histories x arms, {skipped} already complete"
    )
    progress.detail(f"[pmem sweep] run directory {store.root}; this log: {store.root / PROGRESS_LOG}")
    not_run: dict[str, int] = defaultdict(int)
    for (_, _, arm, _), (n, _why) in plan.not_run.items():
        not_run[arm] += n
    for arm, n in sorted(not_run.items()):
        progress.note(f"[pmem sweep] not run: {arm} ({n} histories): {NEEDS_A_MODEL}")
    redone = 0
    try:
        if len(plan.units) > skipped:
            _summaries, redone = execute(plan, runners=runners, progress=progress, log=log)
    finally:
        progress.close()
    judged = 0
    if not (spec.run.predict_only if predict_only is None else predict_only) and spec.judge is not None:
        judged = judge_pass(plan, log=log)
    failures = []
    failed_now = store.failed()
    if failed_now:
        import pyarrow.parquet as pq

        for uid in sorted(failed_now):
            p = store.root / failed_history_file(uid)
            try:
                row = pq.read_table(p).to_pylist()[0]
            except Exception:
                continue
            failures.append({k: row.get(k) for k in ("history_id", "arm", "subset", "error")})
    res = SweepResult(
        run_dir=store.root,
        run_id=plan.run_id,
        total=len(plan.units),
        skipped=skipped,
        completed=len(store.completed() & {u.uid for u in plan.units}),
        failed=len(failed_now & {u.uid for u in plan.units}),
        redone=redone,
        wall_s=time.monotonic() - t0,
        failures=failures,
        judged=judged,
        calls=progress.calls,
        tokens=progress.tokens,
        exec_s=progress.exec_s,
        agents=tuple(a.backend for a in spec.agents),
    )
    summary = {k: v for k, v in res.__dict__.items() if k != "run_dir"}
    summary["run_dir"] = str(res.run_dir)
    atomic_write_bytes(store.root / SUMMARY, json.dumps(summary, indent=2, default=str).encode())
    return res


def _already_complete(plan: Plan) -> dict[tuple[str, str], int]:
    """Histories per (subset, arm) committed by earlier invocations: skipped by this one."""
    completed = plan.store.completed()
    already: dict[tuple[str, str], int] = defaultdict(int)
    for u in plan.units:
        if u.uid in completed:
            already[u.group] += 1
    return dict(already)


def _kill_orphans(run_id: str, log: Any) -> None:
    """Runners of a killed driver may outlive it briefly: make sure none still writes to this run."""
    import ray

    prefix = f"pmem-runner:{run_id}:"
    try:
        named = ray.util.list_named_actors(all_namespaces=True)
    except Exception:
        return
    victims = []
    for entry in named:
        name, ns = (entry["name"], entry.get("namespace")) if isinstance(entry, dict) else (entry, None)
        if name.startswith(prefix):
            try:
                actor = ray.get_actor(name, namespace=ns)
            except ValueError:
                continue
            ray.kill(actor, no_restart=True)
            victims.append(actor)
    for actor in victims:  # wait until each is gone, so its writes have stopped
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                ray.get(actor.ready.remote(), timeout=1)
            except Exception:
                break
            time.sleep(0.1)
    if victims:
        log(f"[pmem sweep] stopped {len(victims)} runner(s) left over from an earlier driver of this run")
