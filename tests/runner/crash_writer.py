"""A commit writer that dies at a chosen step of the commit protocol (run as a child process).

``python crash_writer.py RUN_DIR BATCH STEP``: stages one batch (results, histories and a state file)
and commits it, calling ``os._exit(137)`` (as SIGKILL would: no cleanup, no finally blocks) when the
protocol reaches STEP. STEP ``none`` commits normally and prints every step's name, one per line.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pmem._atomic as atomic
from pmem import ProvenanceGraph
from pmem.rundir import HistoryRow, ParamColumns, ResultRow, RowKeys
from pmem.runner._store import RunStore, write_table

NO_PARAMS = ParamColumns(L=None, d=None, length=None, params=None).columns()


def row(uid: str) -> dict[str, object]:
    return RowKeys(
        run_id="r", unit_id=uid, benchmark="b", subset="s", history_id=uid, arm="a", model="m"
    ).columns()


def stage_batch(store: RunStore, batch: str, uids: list[str]):
    st = store.stage("tok", batch)
    write_table(
        st.path_for(f"histories/part-{batch}.parquet"),
        [
            HistoryRow(
                **row(u), status="complete", error=None, attempt=0, n_events=1, n_questions=1, **NO_PARAMS
            )
            for u in uids
        ],
        "histories",
    )
    write_table(
        st.path_for(f"results/part-{batch}.parquet"),
        [
            ResultRow(
                **row(u),
                question_id=f"{u}-q",
                question_type="current",
                question=None,
                prediction=None,
                gold=None,
                correct=True,
                stale=None,
                read_tokens=None,
                read_chars=None,
                **NO_PARAMS,
            )
            for u in uids
        ],
        "results",
    )
    for u in uids:
        g = ProvenanceGraph()
        g.apply("accept", f"{u}.room", "kitchen", evidence=g.observe(f"{u} is in the kitchen", source="user"))
        with open(st.path_for(f"states/a/{u}.arrow"), "wb") as f:
            f.write(g.to_bytes())
    st.units.extend(uids)
    st.drop.extend(f"histories/failed-{u}.parquet" for u in uids)
    return st


def main() -> None:
    root, batch, step = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    store = RunStore(root)
    store.ensure()
    seen: list[str] = []

    def hook(name: str) -> None:
        seen.append(name)
        if name == step:
            os._exit(137)

    atomic.fault_hook = hook
    store.commit(stage_batch(store, batch, [f"{batch}-u1", f"{batch}-u2"]))
    if step == "none":
        print("\n".join(seen))


if __name__ == "__main__":
    main()
