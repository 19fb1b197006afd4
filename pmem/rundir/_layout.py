"""Where each file of ``runs/<id>/`` lives: every folder and file name of a run directory, defined once.

::

    runs/<id>/
      results/ writes/ requests/ histories/ judgments/   the Parquet datasets (pmem.rundir.DATASETS)
        part-<batch>.parquet                             a commit batch's rows (part_file)
        failed-<unit>.parquet                            histories/: a failed history's status row
        failed-<unit>-<attempt>[.<n>].parquet            requests/: the calls of a failed run of a history
        judge-<tag>.parquet                              judgments/, requests/: a judging pass's rows
      states/<arm>/<history>.<unit>.arrow|.tar           each history's state (state_path)
      _commits/<batch>.json                              a commit record (pmem.rundir.CommitRecord)
      _staging/<runner>/<batch>/                         batches being written (invisible to readers)
      run.toml  plan.json  summary.json                  the resolved config, the plan, the last summary
      cache/responses.sqlite                             the response cache (unless configured elsewhere)
      logs/                                              text logs: servers', the sweep's progress (_files)
      report/                                            ``pmem report``'s output (its own layout: pmem.report)
      .lock                                              held by the sweep writing the run (pmem._lock)

Paths in commit records and in ``histories.state_path`` are relative to the run directory, ``/``-separated.
Plan cells (``plan.json``) are :class:`PlanCell` objects; :data:`PLAN_FIELDS` are the fields every cell has.

>>> state_path("pmem", "longmemeval/s/q1", "0123456789abcdef", GRAPH_STATE)
'states/pmem/longmemeval__s__q1.0123456789.arrow'
>>> part_file("results", "b1")
'results/part-b1.parquet'
"""

from __future__ import annotations

from dataclasses import MISSING, asdict, dataclass, fields
from pathlib import Path
from typing import Any, Final

from pmem.rundir._datasets import HISTORIES, REQUESTS

# -- folders ------------------------------------------------------------------------------------------
#: each history's state: ``states/<arm>/<history>.<unit>.<suffix>`` (see :func:`state_path`)
STATES: Final = "states"
#: one commit record per batch: ``_commits/<batch>.json`` (see :class:`pmem.rundir.CommitRecord`)
COMMITS: Final = "_commits"
#: batches being written, ``_staging/<runner>/<batch>/``; also the runner's scratch files
STAGING: Final = "_staging"
#: the response cache's folder (``cache/responses.sqlite`` unless the config names another file)
CACHE: Final = "cache"
#: where ``pmem report`` writes by default
REPORT: Final = "report"

# -- files --------------------------------------------------------------------------------------------
#: the resolved sweep config, its identity and the versions that ran it (the run's copy of its config)
RUN_TOML: Final = "run.toml"
#: what the latest invocation planned per (benchmark, subset, arm, agent model): ``{"run_id", "cells"}``
PLAN: Final = "plan.json"
#: the latest invocation's summary (counts, failures, wall time)
SUMMARY: Final = "summary.json"
#: the response cache's file name, under :data:`CACHE`
RESPONSE_CACHE: Final = "responses.sqlite"
#: the exclusive lock of the sweep writing the run (:func:`pmem._lock.hold_exclusive`)
LOCK: Final = ".lock"

# -- state files --------------------------------------------------------------------------------------
#: a P-Mem graph's state (``ProvenanceGraph.save``)
GRAPH_STATE: Final = ".arrow"
#: a peer library's store, its folder as one tar archive
STORE_STATE: Final = ".tar"

_FAILED = "failed-"
_PARQUET = ".parquet"


def safe_name(text: str, limit: int = 80) -> str:
    """``text`` as one file-name component: characters other than letters, digits and ``-_.=`` become
    ``_``, cut to ``limit`` characters (never empty)."""
    out = "".join(c if c.isalnum() or c in "-_.=" else "_" for c in text)
    return out[:limit] or "_"


def state_stem(history_id: str) -> str:
    """The file-name stem of a history's states (``/`` in the id becomes ``__``)."""
    return safe_name(history_id.replace("/", "__"), 120)


def state_path(arm: str, history_id: str, unit_id: str, suffix: str) -> str:
    """The state file of ``history_id`` through ``arm`` (unit ``unit_id``), relative to the run directory:
    ``states/<arm>/<history>.<first 10 characters of the unit id><suffix>``, as recorded in
    ``histories.state_path``. ``suffix`` is :data:`GRAPH_STATE` or :data:`STORE_STATE`."""
    return f"{STATES}/{safe_name(arm)}/{state_stem(history_id)}.{unit_id[:10]}{suffix}"


def states_of(run_dir: Path, history_id: str, suffix: str = GRAPH_STATE) -> dict[str, Path]:
    """Each arm's state file of ``history_id`` in ``run_dir`` (by arm folder), those with ``suffix``."""
    stem = state_stem(history_id)
    out: dict[str, Path] = {}
    for path in sorted((Path(run_dir) / STATES).glob(f"*/{stem}.*{suffix}")):
        if path.name[: len(stem) + 1] == f"{stem}.":
            out[path.parent.name] = path
    return out


def part_file(dataset: str, batch_id: str) -> str:
    """The file of commit batch ``batch_id``'s rows of ``dataset``, relative to the run directory."""
    return f"{dataset}/part-{batch_id}{_PARQUET}"


def judge_file(dataset: str, tag: str) -> str:
    """The file of a judging pass's rows of ``dataset`` (``judgments``, ``requests``)."""
    return f"{dataset}/judge-{tag}{_PARQUET}"


def failed_history_file(unit_id: str) -> str:
    """A failed history's status row (replaced if it fails again, dropped by the batch that completes it)."""
    return f"{HISTORIES.name}/{_FAILED}{unit_id}{_PARQUET}"


#: the file names of failed histories' status rows, in ``histories/``
FAILED_HISTORIES_GLOB: Final = f"{_FAILED}*{_PARQUET}"


def failed_unit(name: str) -> str:
    """The unit id in a :func:`failed_history_file` name (``failed-<unit>.parquet``)."""
    return name[len(_FAILED) : -len(_PARQUET)]


def failed_requests_file(unit_id: str, attempt: int, n: int = 1) -> str:
    """The request rows of failed run ``attempt`` of a history; ``n`` > 1 when that name was taken."""
    return f"{REQUESTS.name}/{_FAILED}{unit_id}-{attempt}" + (f".{n}" if n > 1 else "") + _PARQUET


# -- plan.json ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PlanCell:
    """One cell of ``plan.json``: the histories planned for (benchmark, subset, arm, agent model).

    An arm that cannot run with the agent is planned with ``histories`` 0, ``not_run`` saying why and
    ``skipped`` how many histories it left out; both are absent from the JSON of other cells.
    """

    benchmark: str
    subset: str
    arm: str
    model: str
    histories: int
    not_run: str | None = None
    skipped: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None or k in PLAN_FIELDS}


_TYPES: dict[str, type] = {"str": str, "int": int}

#: the fields every plan cell has, and their JSON types (the optional ones are ``not_run`` and ``skipped``)
PLAN_FIELDS: Final[dict[str, type]] = {
    f.name: _TYPES[str(f.type)] for f in fields(PlanCell) if f.default is MISSING
}
