"""Replay: a graph rebuilt from another graph's arrival log, the definition of reads as of the past.

Every arrival has a seq: an observation (evidence text, source, time) or an operation, which records
what was *requested* (op, key, value, evidence) next to what it did. The core is deterministic, so
feeding the arrivals again, in seq order, to an empty graph rebuilds the graph exactly (the same
``to_bytes()``); feeding a subset of them builds the graph that subset alone would have built. That is
what :meth:`ProvenanceGraph.as_of` returns: the arrivals up to a seq, or those observed up to a time.

An operation's time is its evidence's: the evidence's valid time where it has one, else its observation
time; an arrival without a time (evidence observed without one, an operation without evidence) takes the
time of the latest timed arrival before it, and is kept when there is none. Times are compared as ISO
8601 datetimes.

>>> from pmem.graph import ProvenanceGraph
>>> g = ProvenanceGraph()
>>> e = g.observe("budget is 30k", time="2026-01-05")
>>> _ = g.apply("accept", "budget", "30k", evidence=e)
>>> e = g.observe("budget is 50k", time="2026-02-01")
>>> _ = g.apply("accept", "budget", "50k", evidence=e)
>>> g.as_of(2).head_value("budget"), g.as_of(time="2026-01-31").head_value("budget")
('30k', '30k')
>>> g.as_of().to_bytes() == g.to_bytes()
True
"""

from __future__ import annotations

import dataclasses
import numbers
from datetime import datetime
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from pmem.graph._identity._registry import KeyRegistry
from pmem.graph._ops._bulk import WRITE_BATCH_SCHEMA, apply_batch
from pmem.graph._ops._validate import preview, valid_instant

if TYPE_CHECKING:
    from pmem.graph._graph import ProvenanceGraph


def as_of(graph: ProvenanceGraph, seq: int | None = None, time: object = None) -> ProvenanceGraph:
    """A new graph replaying ``graph``'s arrivals up to ``seq`` and observed up to ``time`` (the caller,
    :meth:`ProvenanceGraph.as_of`, makes it read-only)."""
    if seq is not None and (not isinstance(seq, numbers.Integral) or isinstance(seq, bool) or seq < 0):
        msg = f"as_of: seq must be a non-negative integer, got {preview(seq)}"
        raise ValueError(msg)
    cutoff = None if time is None else _instant(time, "as_of: time")
    log = arrival_log(graph)
    keep = np.ones(len(log["seq"]), np.bool_)
    if seq is not None:
        keep &= log["seq"] <= int(seq)
    if cutoff is not None:
        keep &= _observed_by(graph, log, cutoff)
    replayed = graph.empty(
        registry=_registry_copy(graph),
        authority=graph.storage.authority.initial(),
        default_authority=graph.storage.authority.default(),
    )
    bound = graph.seq if seq is None else int(seq)
    _replay_into(replayed, graph, log, keep, bound)
    return replayed


def arrival_log(graph: ProvenanceGraph) -> dict[str, Any]:
    """The arrivals in seq order, as columns: ``seq``, ``evidence`` (index of an observation, -1 for an
    operation) and ``op`` (index into the operation log, -1 for an observation)."""
    n_ev = graph.storage.evidence.count()
    ops = list(graph.operations())
    seq = np.concatenate(
        [graph.storage.evidence.seqs(), np.fromiter((o.seq for o in ops), np.int64, len(ops))]
    )
    order = np.argsort(seq, kind="stable")
    index = np.arange(len(seq))
    is_ev = index < n_ev
    return {
        "seq": seq[order],
        "evidence": np.where(is_ev, index, -1)[order],
        "op": np.where(is_ev, -1, index - n_ev)[order],
        "operations": ops,
    }


def _observed_by(graph: ProvenanceGraph, log: dict[str, Any], cutoff: datetime) -> np.ndarray:
    """Which arrivals were observed at or before ``cutoff`` (see the module's rule for untimed ones)."""
    ops = log["operations"]
    keep = np.ones(len(log["seq"]), np.bool_)
    latest: datetime | None = None
    ev_time: dict[int, datetime | None] = {}
    for i, (ev, op) in enumerate(zip(log["evidence"].tolist(), log["op"].tolist(), strict=True)):
        if ev >= 0:
            observed, valid = graph.storage.evidence.times(ev)
            text = observed if valid is None else valid
            when = latest if text is None else _instant(text, f"evidence e{ev}: time")
            ev_time[ev] = when
        else:
            cited = ops[op].evidence
            when = latest if cited is None else ev_time.get(int(cited[1:]), latest)
        if when is not None:
            latest = when
            keep[i] = when <= cutoff
    return keep


def _instant(value: object, what: str) -> datetime:
    """``value`` as compared (naive UTC, as valid times are)."""
    try:
        return valid_instant(value, "as_of")[1]
    except ValueError:
        msg = f"{what} must be an ISO 8601 date or datetime, got {preview(value)}"
        raise ValueError(msg) from None


def _replay_into(
    replayed: ProvenanceGraph, graph: ProvenanceGraph, log: dict[str, Any], keep: np.ndarray, bound: int
) -> None:
    """Feed the kept arrivals to ``replayed``: column-wise, except operations that named premises.

    An operation with premises is applied on its own with them (``depends_on``), less any premise that
    has no head in the replay (a time bound can leave one out). Source authority settings are made at
    their place in the log: after the arrival they followed, if it is at most ``bound``. A retraction
    is replayed with the value it retracts (the batch's side column), so that one whose value is not
    the head in the replay is a noop, as it is in an undo or erasure.
    """
    store = graph.storage
    settings = [s for s in store.authority.settings() if s[0] <= bound]
    arrival_seqs = log["seq"][keep].tolist()
    # an undo names its target by the seq it has in the replay: arrivals are numbered as they are fed
    replay_seq: dict[int, int] = {}
    ops = log["operations"]
    evidence = log["evidence"][keep].tolist()
    op_rows = log["op"][keep].tolist()
    new_index = {ev: i for i, ev in enumerate(e for e in evidence if e >= 0)}
    columns: dict[str, list[Any]] = {name: [] for name in WRITE_BATCH_SCHEMA.names}
    retracts: list[str | None] = []  # per batch row: the value a retraction retracts

    def flush() -> None:
        if columns["op"]:
            table = pa.table(columns, schema=WRITE_BATCH_SCHEMA)
            named = any(t is not None for t in retracts)  # else the batch's values are its only codes
            apply_batch(replayed, table, pa.array(retracts, pa.large_string()) if named else None)
            for column in columns.values():
                column.clear()
            retracts.clear()

    def set_before(seq: int) -> None:
        while settings and settings[0][0] < seq:
            flush()
            _, source, level = settings.pop(0)
            replayed.set_authority(source, level)

    for ev, op, at in zip(evidence, op_rows, arrival_seqs, strict=True):
        set_before(at)
        if op >= 0:
            o = ops[op]
            if o.evidence is not None and store.evidence.is_erased(int(o.evidence[1:])):
                continue  # never happened: its evidence is erased
            if store.log.retracts_only_erased(op):
                continue  # retracts a value only erased evidence stated: a noop in every replay
            if o.requested == "undo" and ops[store.log.undone_op(op)].seq not in replay_seq:
                continue  # a bound left the undone operation out: nothing to undo
        replay_seq[at] = len(replay_seq) + 1
        if ev >= 0:
            text, source, observed, _, valid = store.evidence.fields(ev)
            if valid is not None:  # the batch has no valid-time column
                flush()
                replayed.observe(text, source, observed, valid)
                continue
            row: tuple[Any, ...] = (None, text, source, observed, None, None, None)
        else:
            cited = None if o.evidence is None else new_index[int(o.evidence[1:])]
            if o.requested == "undo":
                flush()
                replayed.undo(
                    replay_seq[ops[store.log.undone_op(op)].seq], None if cited is None else f"e{cited}"
                )
                continue
            alias = store.log.alias(op)
            premised = store.log.premise_keys(op)
            if premised or (alias is not None and alias != o.key):
                flush()
                held = None
                if premised:
                    names = [store.keys.name(k) for k in premised]
                    held = [name for name in names if replayed.head_value(name) is not None]
                ev_id = None if cited is None else f"e{cited}"
                # an alias that is now the operation's own key was split off: the replay applies it there
                alias = None if alias == o.key else alias
                target = store.log.retracted_value(op)
                replayed.apply(
                    o.requested, o.key, o.value, ev_id, depends_on=held, alias=alias, retracts=target
                )
                continue
            row = (o.requested, None, None, None, o.key, o.value, cited)
        for name, cell in zip(WRITE_BATCH_SCHEMA.names, row, strict=True):
            columns[name].append(cell)
        retracts.append(None if op < 0 else store.log.retracted_value(op))
    flush()
    set_before(bound + 1)


def _registry_copy(graph: ProvenanceGraph) -> KeyRegistry | None:
    """The identity registry's keys and decisions (they carry no seq, so they are not cut)."""
    source = graph.registry_in_use
    if source is None:  # none was ever used: none is made (it would be saved)
        return None
    copy = KeyRegistry(threshold=source.threshold)
    copy.restore(source.keys, [dataclasses.asdict(d) for d in source.decisions], source.config())
    return copy
