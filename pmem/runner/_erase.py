"""Erasure in a run directory: one evidence of one history, everywhere the run keeps a copy of it.

:func:`erase_in_run` (``pmem erase RUN_DIR EVIDENCE --history H``) takes the evidence's text from one
arm's state of the history, then:

- erases the evidence with that text from the history's state in every arm (each arm has its own graph
  and evidence ids; the statement is the same event);
- scrubs, in the rows of that history, every text field of ``results/``, ``writes/``, ``requests/``,
  ``histories/`` and ``judgments/`` that holds the statement or a value only it stated (gold answers,
  predictions and raw replies included: a question answered before the erasure saw the value);
- deletes the response cache's entries whose replies hold them (bytes overwritten, write-ahead log
  emptied), and scrubs the text files of ``report/`` and ``logs/``;
- writes each changed file's new sha256 into its commit record, so that recovery keeps the batch (a
  dropped batch would run the history again and state the fact again);
- finally searches every byte of the run directory for what it erased: a copy left anywhere (a file it
  does not know how to scrub) is named, and the call raises.

The benchmark's own data is not the run's: a history generated again states the fact again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pmem._atomic import file_sha256
from pmem._lock import hold_exclusive
from pmem._scrub import erase_from_cache, holds, scrub_parquet, scrub_table, scrub_text_file, stated_only_by
from pmem.graph import ProvenanceGraph
from pmem.rundir import CACHE, DATASETS, LOCK, LOGS, REPORT, STATES, record_digests, states_of
from pmem.rundir import columns as C

#: the datasets whose rows name a history (every dataset of a run)
_DATASETS = tuple(DATASETS)


class RunErasureError(ValueError):
    """The erasure could not be made (unknown history or evidence), or left a copy it names."""


@dataclass
class RunErasure:
    """What :func:`erase_in_run` did: the evidence (in ``arm``'s state), each arm's changed keys
    (before, after), and every place cleaned."""

    history_id: str
    evidence: str
    arm: str
    changed: dict[str, dict[str, tuple[str | None, str | None]]] = field(default_factory=dict)
    cleaned: list[str] = field(default_factory=list)


def erase_in_run(run_dir: str | Path, history_id: str, evidence: str, arm: str | None = None) -> RunErasure:
    """Erase ``evidence`` (an id in ``arm``'s state of the history; default: ``pmem``'s, else the first
    arm with a state) from every copy the run keeps (see the module docstring).

    Raises:
        RunErasureError: no state of that history, no such evidence, or a copy left that it names.
        LockHeldError: a sweep is writing the run now.

    Example::

        receipt = erase_in_run("runs/quickstart-f34884bd0388", "provenance-probes/erasure/case000", "e3")
    """

    run_dir = Path(run_dir)
    lock = hold_exclusive(
        run_dir / LOCK, f"{run_dir} (a `pmem sweep` run directory)", hint="wait for that sweep to end"
    )
    try:
        # each arm's P-Mem graph of the history (a peer library's .tar store is not erased here)
        states = states_of(run_dir, history_id)
        if not states:
            msg = f"{run_dir}: no state of history {history_id!r} under states/ (history ids are in results/)"
            raise RunErasureError(msg)
        chosen = arm or ("pmem" if "pmem" in states else next(iter(states)))
        if chosen not in states:
            msg = f"{run_dir}: history {history_id!r} has no state of arm {chosen!r} (arms with one: {', '.join(states)})"
            raise RunErasureError(msg)
        reference = ProvenanceGraph.load(states[chosen])
        try:
            text = reference.evidence(evidence).text
        except KeyError:
            msg = f"{states[chosen]}: no evidence {evidence!r}"
            raise RunErasureError(msg) from None
        if not text:
            msg = f"{states[chosen]}: evidence {evidence!r} is erased already"
            raise RunErasureError(msg)
        receipt = RunErasure(history_id, evidence, chosen)
        needles = [text]
        sums: dict[str, str] = {}
        for name, path in states.items():
            before = ProvenanceGraph.load(path)
            graph = ProvenanceGraph.load(path)
            ids = [f"e{i}" for i in range(graph.stats()["evidence"]) if graph.evidence(f"e{i}").text == text]
            changed: dict[str, tuple[str | None, str | None]] = {}
            for eid in ids:
                r = graph.erase(eid)
                changed.update(r.changed)
                needles += stated_only_by(before, graph, r)
            if ids:
                graph.save(path)
                sums[str(path.relative_to(run_dir))] = file_sha256(path)
                receipt.changed[name] = changed
                receipt.cleaned.append(f"{path} ({', '.join(ids)} erased)")
        needles = list(dict.fromkeys(needles))

        def of_history(table: pa.Table) -> np.ndarray:
            """The rows of the history (a dataset without the column has none)."""
            if C.HISTORY_ID not in table.column_names:
                return np.zeros(table.num_rows, dtype=np.bool_)
            return np.array([h == history_id for h in table.column(C.HISTORY_ID).to_pylist()], dtype=np.bool_)

        for dataset in _DATASETS:
            for path in sorted((run_dir / dataset).glob("*.parquet")):
                rows = scrub_parquet(path, needles, of_history)
                if rows:
                    sums[str(path.relative_to(run_dir))] = file_sha256(path)
                    receipt.cleaned.append(f"{path} ({rows} rows)")
        for cache in sorted((run_dir / CACHE).glob("*.sqlite")):
            receipt.cleaned.append(erase_from_cache(cache, needles))
        for folder in (REPORT, LOGS):
            for path in sorted(p for p in (run_dir / folder).rglob("*") if p.is_file()):
                count = scrub_text_file(path, needles)
                if count > 0:
                    receipt.cleaned.append(f"{path} ({count} occurrences)")
        record_digests(run_dir, sums)
        left = _still_holding(run_dir, needles, set(states.values()), history_id, of_history)
        if left:
            msg = f"{run_dir}: erased where it could, but these files still hold the statement or its values: {', '.join(left)}"
            raise RunErasureError(msg)
        return receipt
    finally:
        lock.release()


def _still_holding(
    run_dir: Path,
    needles: list[str],
    own_states: set[Path],
    history_id: str,
    of_history: Callable[[pa.Table], np.ndarray],
) -> list[str]:
    """What still holds one of ``needles``: any file, byte for byte, but the states of other histories
    (another history may state the same sentence: it is not erased); in the datasets, the history's
    own rows."""
    datasets = {run_dir / d for d in _DATASETS}
    left = []
    for path in sorted(p for p in run_dir.rglob("*") if p.is_file() and p.name != LOCK):
        if path.parent.parent == run_dir / STATES and path not in own_states:
            continue
        if path.parent in datasets and path.suffix == ".parquet":
            table = pq.read_table(path)
            if scrub_table(table, needles, of_history(table))[1]:
                left.append(f"{path.relative_to(run_dir)} (rows of {history_id})")
        elif holds(path, needles):
            left.append(str(path.relative_to(run_dir)))
    return left
