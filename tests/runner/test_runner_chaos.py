"""Chaos: the quickstart survives random kills of the driver, a runner actor or a model replica.

The quickstart config (jobs/quickstart.toml, its benchmarks and arms) runs with ``--limit 2`` and its
agent hosted as two vLLM-like replicas (the heuristic stand-in server, one logical GPU each), so that
there are model replica processes to kill. One uninterrupted run is the reference. Then, N times
(``PMEM_CHAOS_TRIALS``, at least 10; victims round-robin over the three kinds, so each kind occurs at
least 3 times in 10), a fresh sweep is started and, once a random number of histories are committed
and a random delay later, one victim is SIGKILLed:

- ``driver``: the ``pmem sweep`` process; the same command is run again and must exit 0;
- ``runner``: the process of a runner actor that holds histories; the running driver must replace it
  and exit 0;
- ``replica``: one replica's server process; the calls fail over, the replica restarts, the driver
  must exit 0.

Every trial must then hold the reference's result keys (no more, no fewer, no duplicates), the same
completed histories, and byte-identical state files under ``states/`` (same relative paths). A kill
that did not land mid-run (the run had committed everything already) is not counted as a fault: the
trial is tried again, killing as early as possible. After every sweep, no runner actor, no replica server
(orphans included: a server whose replica process is gone) and no held GPU may be left. Every wait polls
a condition under a bound; the outcome never depends on how long something took. Prints
``faults survived: k/N``.

Choices (victim, moment) come from ``random.Random(PMEM_CHAOS_SEED)`` (default fixed, printed).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from runner_helpers import read, result_keys, runner_pids, stop_processes, sweep_argv

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
QUICKSTART = REPO / "jobs" / "quickstart.toml"

TRIALS = max(10, int(os.environ.get("PMEM_CHAOS_TRIALS", "10")))
SEED = int(os.environ.get("PMEM_CHAOS_SEED", "20240917"))
KINDS = ("driver", "runner", "replica")
LIMIT = 2  # histories per cell
# Bounds that tell a hang from a slow machine: one `pmem sweep` takes ~35 s on 2 idle cores, ~150 s on
# the same cores under 4x load; a sweep (start to exit, or to the moment of a kill) that has not ended
# within RUN_TIMEOUT_S is a hang.
RUN_TIMEOUT_S = float(os.environ.get("PMEM_CHAOS_RUN_TIMEOUT_S", "900"))
CLEAN_TIMEOUT_S = 300  # a finished sweep's actors and replica servers must be gone within this
ATTEMPTS = 3  # per trial: a kill that lands after the last commit is retried, earlier
MAX_FAILURES = 3  # stop early: a broken build should not spend N x RUN_TIMEOUT_S

AGENT_HEURISTIC = '[models.agent]\nbackend = "heuristic"\n'
AGENT_REPLICAS = (
    '[models.agent]\nbackend = "vllm"\nlauncher = "standin"\nmodel = "heuristic"\nreplicas = 2\n'
    "health_timeout_s = 120\n"
)


def _chaos_config(tmp: Path) -> Path:
    """The quickstart, its agent hosted as 2 stand-in replicas (benchmarks, arms and [run] unchanged)."""
    text = QUICKSTART.read_text()
    assert text.count(AGENT_HEURISTIC) == 1, "jobs/quickstart.toml no longer has the expected agent table"
    path = tmp / "quickstart-chaos.toml"
    path.write_text(text.replace(AGENT_HEURISTIC, AGENT_REPLICAS))
    return path


# -- observing a run --------------------------------------------------------------------------------


def _committed(run_dir: Path) -> set[str]:
    """Units in the commit records now (records appear by rename; one dropped meanwhile is skipped)."""
    done: set[str] = set()
    for p in (run_dir / "_commits").glob("*.json"):
        with contextlib.suppress(OSError, ValueError):
            done.update(json.loads(p.read_bytes())["units"])
    return done


def _live_runners(ray: Any, run_dir: Path) -> dict[tuple[str, str], int]:
    try:
        return runner_pids(ray, run_dir)
    except Exception:  # none started yet, or one died between being listed and answering
        return {}


def _busy_runners(ray: Any, run_dir: Path) -> dict[int, int]:
    """Live runners of the run that hold histories (running, or waiting for their commit): pid -> how many."""
    busy = {}
    for (name, namespace), pid in _live_runners(ray, run_dir).items():
        try:
            stats = ray.get(ray.get_actor(name, namespace=namespace).stats.remote(), timeout=30)
        except Exception:  # it died meanwhile
            continue
        if stats["in_flight"] + stats["pending_commit"]:
            busy[pid] = stats["in_flight"] + stats["pending_commit"]
    return busy


def _runner_names(ray: Any, run_id: str) -> list[str]:
    """The named runner actors of run ``run_id`` that the cluster still lists (of any driver)."""
    prefix = f"pmem-runner:{run_id}:"
    return [
        e["name"] for e in ray.util.list_named_actors(all_namespaces=True) if e["name"].startswith(prefix)
    ]


def _proc_parent(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])


def _proc_cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
    except OSError:
        return b""


def _raylet_pid(gcs_address: str) -> int:
    """The pid of the raylet of the cluster at ``gcs_address`` (this machine's only node)."""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            argv = _proc_cmdline(int(entry)).split(b" ")
            if argv[0].endswith(b"/raylet") and f"--gcs-address={gcs_address}".encode() in argv:
                return int(entry)
    raise AssertionError(f"no raylet of the cluster at {gcs_address}")


def _replica_servers(raylet: int) -> dict[int, int | None]:
    """Replica server processes of the cluster whose raylet is ``raylet``: pid -> the pid of the
    ``ray::ReplicaActor`` worker that runs it, or None for an orphan (its replica's process is gone).

    A server is ``python -m pmem.models.server`` started by a worker of that raylet (so its environment,
    the worker's, names the raylet: RAY_RAYLET_PID), whatever its parent is now."""
    out: dict[int, int | None] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        if b"pmem.models.server" not in _proc_cmdline(pid):
            continue
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"RAY_RAYLET_PID={raylet}".encode() not in env:
            continue
        worker = _proc_parent(pid)
        alive = worker is not None and _proc_cmdline(worker).startswith(b"ray::ReplicaActor")
        out[pid] = worker if alive else None
    return out


def _sigkill(pid: int) -> bool:
    """SIGKILL ``pid``; False when it was already gone."""
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return False
    return True


def _wait_for(condition: Any, timeout_s: float, what: Any) -> None:
    """Poll ``condition`` until true; fail after ``timeout_s`` with ``what`` (a text, or one to compute)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, (
            f"{what() if callable(what) else what}: not within {timeout_s:g} s"
        )
        time.sleep(0.1)


# -- the run's outcome ------------------------------------------------------------------------------


def _calls_per_unit(requests: Any) -> Counter[str]:
    """Calls that got their reply, per unit. A request that failed (a killed replica's) is a row of its
    own, retried elsewhere; so are the rows of a history's failed run: neither is a call of the history."""
    rows = zip(
        requests.column("unit_id").to_pylist(),
        requests.column("error").to_pylist(),
        requests.column("history_failed").to_pylist(),
        strict=True,
    )
    return Counter(unit for unit, error, failed_run in rows if error is None and not failed_run)


def _snapshot(run_dir: Path) -> dict[str, Any]:
    keys = result_keys(run_dir)
    hist = read(run_dir, "histories")
    states = run_dir / "states"
    return {
        "keys": keys,
        "units": hist.column("unit_id").to_pylist(),
        "status": set(hist.column("status").to_pylist()),
        "requests": _calls_per_unit(read(run_dir, "requests")),
        "states": {
            p.relative_to(states).as_posix(): p.read_bytes() for p in states.rglob("*") if p.is_file()
        },
        "summary": json.loads((run_dir / "summary.json").read_text()),
    }


def _check_against(ref: dict[str, Any], got: dict[str, Any]) -> None:
    """Same result keys, no duplicates, same histories, byte-identical state files."""
    dup = [k for k, n in Counter(got["keys"]).items() if n > 1]
    assert not dup, f"{len(dup)} duplicate result keys, e.g. {dup[:3]}"
    missing, extra = set(ref["keys"]) - set(got["keys"]), set(got["keys"]) - set(ref["keys"])
    assert not missing and not extra, (
        f"result keys differ: {len(missing)} missing {sorted(missing)[:3]}, "
        f"{len(extra)} extra {sorted(extra)[:3]}"
    )
    dup_units = [u for u, n in Counter(got["units"]).items() if n > 1]
    assert not dup_units, f"histories committed twice: {dup_units[:3]}"
    assert sorted(got["units"]) == sorted(ref["units"]), "the completed histories differ"
    assert got["status"] == {"complete"}, f"history statuses {got['status']}"
    assert got["requests"] == ref["requests"], "the request log differs per history (calls repeated or lost)"
    paths, ref_paths = set(got["states"]), set(ref["states"])
    assert paths == ref_paths, (
        f"state files differ: missing {sorted(ref_paths - paths)[:3]}, extra {sorted(paths - ref_paths)[:3]}"
    )
    differ = sorted(p for p in paths if got["states"][p] != ref["states"][p])
    assert not differ, f"{len(differ)} state files not byte-identical, e.g. {differ[:3]}"
    s = got["summary"]
    assert (s["completed"], s["failed"]) == (s["total"], 0), s


# -- driving a sweep --------------------------------------------------------------------------------


class Sweep:
    """``pmem sweep`` subprocesses on the session's cluster, writing one --out folder."""

    def __init__(self, cfg: Path, out: Path, address: str, log: Path) -> None:
        self.argv = sweep_argv(cfg, out, address, "--limit", str(LIMIT))
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> subprocess.Popen[bytes]:
        with open(self.log, "ab") as log:  # a file, not a pipe: a chatty driver can never block on it
            self.proc = subprocess.Popen(self.argv, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
        return self.proc

    def finish(self) -> int:
        """Wait for the running driver to exit (bounded: a hang fails the trial)."""
        assert self.proc is not None
        try:
            return self.proc.wait(RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(30)
            raise AssertionError(
                f"the driver hung: still running after {RUN_TIMEOUT_S:g} s\n{self.tail()}"
            ) from None

    def run(self) -> int:
        self.start()
        return self.finish()

    def last_line(self) -> str:
        lines = [ln for ln in self.log.read_text(errors="replace").splitlines() if ln.strip()]
        return lines[-1] if lines else ""

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)


def _wait_quiet(ray: Any, run_dir: Path, raylet: int, gpus: float) -> None:
    """After a sweep: none of its runners, no replica server (orphans included), every GPU free again."""
    _wait_for(
        lambda: not _runner_names(ray, run_dir.name), CLEAN_TIMEOUT_S, "runner actors outlived the sweep"
    )
    _wait_for(
        lambda: not _replica_servers(raylet),
        CLEAN_TIMEOUT_S,
        lambda: (
            f"replica servers outlived the sweep (pid -> its replica's pid; None: an orphan): "
            f"{_replica_servers(raylet)}"
        ),
    )
    _wait_for(
        lambda: ray.available_resources().get("GPU", 0) == gpus,
        CLEAN_TIMEOUT_S,
        "the replicas' GPUs were not given back",
    )


def _trial(
    ray: Any,
    raylet: int,
    cfg: Path,
    out: Path,
    run_id: str,
    total: int,
    kind: str,
    rng: random.Random,
    threshold: int,
    jitter_s: float,
) -> dict[str, Any]:
    """One sweep, one kill of ``kind`` once ``threshold`` units are committed (+ ``jitter_s``), then on
    to a finished run. Returns what happened; asserts that the sweep survived."""
    address = ray.get_runtime_context().gcs_address
    run_dir = out / run_id
    sweep = Sweep(cfg, out, address, out.with_suffix(".log"))
    proc = sweep.start()
    note: dict[str, Any] = {"kind": kind, "threshold": threshold, "jitter_s": jitter_s}
    try:
        # the moment: enough units committed, and a victim of the chosen kind exists
        deadline = time.monotonic() + RUN_TIMEOUT_S
        victims: list[int] = []
        held: dict[int, int] = {}
        while proc.poll() is None:
            assert time.monotonic() < deadline, f"no moment to kill a {kind} within {RUN_TIMEOUT_S:g} s"
            if len(_committed(run_dir)) >= threshold:
                if kind == "replica":
                    victims = sorted(pid for pid, actor in _replica_servers(raylet).items() if actor)
                elif kind == "runner":  # one that holds histories: its death loses work
                    held = _busy_runners(ray, run_dir)
                    victims = sorted(held)
                else:  # the driver is killed only once its runners run (and its replicas serve)
                    victims = sorted(_live_runners(ray, run_dir).values())
                if victims:
                    break
            time.sleep(0.05)
        if proc.poll() is None and jitter_s:
            time.sleep(jitter_s)  # a random moment after the condition: mid-batch as well as between
        note["committed_before"] = len(_committed(run_dir))
        if kind == "driver":
            victim, killed = proc.pid, proc.poll() is None and _sigkill(proc.pid)
            rc = proc.wait(30)
            killed = killed and rc == -signal.SIGKILL
        elif victims:
            victim = rng.choice(victims)
            killed = proc.poll() is None and _sigkill(victim)
            if kind == "runner":
                note["victim_held"] = held[victim]
        else:
            victim, killed = -1, False
        # the units committed *after* the kill bound those committed *at* it: fewer than all = mid-run
        note["committed_after"] = len(_committed(run_dir))
        note["victim"] = victim
        note["mid_run"] = bool(killed and note["committed_after"] < total)
        if kind == "replica" and killed:
            note["replica_restarted"] = False
        if kind == "driver":
            # the killed driver's runners may outlive it briefly; the re-run stops them itself
            rc = sweep.run()
            assert rc == 0, f"the re-run after the driver was killed exited {rc}\n{sweep.tail()}"
        else:
            if kind == "replica" and killed:
                # the replica's monitor starts a new server (same actor) while the sweep still needs it
                servers_before, deadline = set(victims), time.monotonic() + RUN_TIMEOUT_S
                while proc.poll() is None and not note["replica_restarted"] and time.monotonic() < deadline:
                    note["replica_restarted"] = bool(set(_replica_servers(raylet)) - servers_before)
                    time.sleep(0.05)
            rc = sweep.finish()
            assert rc == 0, f"the driver exited {rc} after a {kind} was killed\n{sweep.tail()}"
        assert sweep.last_line() == str(run_dir), f"last line {sweep.last_line()!r}, expected the run dir"
        summary = json.loads((run_dir / "summary.json").read_text())
        note["redone"], note["skipped"] = summary["redone"], summary["skipped"]
    finally:
        sweep.kill()
        with contextlib.suppress(Exception):
            stop_processes(ray, _live_runners(ray, run_dir), timeout_s=60)
    return note


@pytest.mark.slow
@pytest.mark.timeout(4 * 3600)  # a backstop: every wait inside is bounded
def test_quickstart_survives_random_kills(
    ray_cluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ray = ray_cluster
    address = ray.get_runtime_context().gcs_address
    gpus = ray.cluster_resources().get("GPU", 0)
    assert gpus >= 2, "the session cluster must have logical GPUs for the 2 replicas"
    cfg = _chaos_config(tmp_path)
    rng = random.Random(SEED)

    def say(text: str) -> None:
        with capsys.disabled():
            print(text, flush=True)

    t0 = time.monotonic()
    raylet = _raylet_pid(address)
    assert not _replica_servers(raylet), "replica servers of an earlier test are still running"
    # the reference: one uninterrupted run
    ref_out = tmp_path / "reference"
    ref_out.mkdir()
    ref_sweep = Sweep(cfg, ref_out, address, tmp_path / "reference.log")
    assert ref_sweep.run() == 0, ref_sweep.tail()
    ref_dir = Path(ref_sweep.last_line())
    assert ref_dir.parent == ref_out and ref_dir.is_dir(), ref_sweep.tail()
    _wait_quiet(ray, ref_dir, raylet, gpus)
    ref = _snapshot(ref_dir)
    total = len(ref["units"])
    _check_against(ref, ref)
    assert ref["states"] and ref["summary"]["total"] == total
    say(
        f"\n[chaos] seed {SEED}; reference {ref_dir.name}: {total} histories x arms, {len(ref['keys'])} "
        f"results, {len(ref['states'])} state files, {time.monotonic() - t0:.0f} s"
    )

    offset = rng.randrange(len(KINDS))
    survived, failures = 0, []
    for i in range(TRIALS):
        kind = KINDS[(offset + i) % len(KINDS)]
        threshold, jitter = rng.randint(0, int(0.6 * total)), rng.uniform(0.0, 1.0)
        for attempt in range(ATTEMPTS):
            out = tmp_path / f"trial-{i:02d}-{attempt}"
            out.mkdir()
            t = time.monotonic()
            try:
                note = _trial(ray, raylet, cfg, out, ref_dir.name, total, kind, rng, threshold, jitter)
                _check_against(ref, _snapshot(out / ref_dir.name))
                _wait_quiet(ray, out / ref_dir.name, raylet, gpus)
            except AssertionError as exc:
                failures.append(f"trial {i} ({kind}, attempt {attempt}): {exc}")
                say(f"[chaos] trial {i}: {kind} FAILED: {str(exc)[:2000]}")
                with contextlib.suppress(AssertionError):
                    _wait_quiet(ray, out / ref_dir.name, raylet, gpus)
                break
            extra = f", replica restarted: {note['replica_restarted']}" if "replica_restarted" in note else ""
            extra += f", victim held {note['victim_held']} histories" if "victim_held" in note else ""
            say(
                f"[chaos] trial {i}: killed {kind} (pid {note['victim']}) at >= {threshold} units "
                f"+ {jitter:.2f} s: {note['committed_before']}-{note['committed_after']}/{total} committed, "
                f"mid-run: {note['mid_run']}; redone {note['redone']}, skipped {note['skipped']}{extra}; "
                f"{time.monotonic() - t:.0f} s"
            )
            shutil.rmtree(out, ignore_errors=True)
            if note["mid_run"]:
                survived += 1
                break
            # the run had committed everything before the kill: not a fault; kill as early as possible
            threshold, jitter = 0, 0.0
        else:
            failures.append(f"trial {i} ({kind}): no kill landed mid-run in {ATTEMPTS} attempts")
        if len(failures) >= MAX_FAILURES:
            break
    say(f"faults survived: {survived}/{TRIALS} ({time.monotonic() - t0:.0f} s)")
    assert survived == TRIALS, "\n".join(failures)
