"""The operation log's index: operations by key, by evidence and by seq (undo, erasure and unmerge).

Built on first use, column-wise over the whole log (so that writes pay nothing for it); the operations
logged since are added one by one on each later use. The store holds it (``GraphStore.operation_index``)
and drops it when operations change keys; it reads the log through the store's
``GraphStore.operation_columns``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from pmem.graph._ops._codes import NONE


@dataclass
class OpIndex:
    """Operations by key, by evidence and by seq, over the first :attr:`upto` log entries."""

    upto: int = 0
    key_of: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # sorted key ids ...
    key_ops: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # ... and their operations
    ev_of: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    ev_ops: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    seqs: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # seq of each indexed op
    tail_key: dict[int, list[int]] = field(default_factory=dict)  # operations logged after the build
    tail_ev: dict[int, list[int]] = field(default_factory=dict)
    tail_seq: dict[int, int] = field(default_factory=dict)

    def extend(self, kid: np.ndarray, ev: np.ndarray, seq: np.ndarray) -> OpIndex:
        """Index the log entries from :attr:`upto` on, given as their (key id, evidence, seq) columns:
        the first time column-wise, later one by one."""
        if self.upto == 0:
            order = np.argsort(kid, kind="stable")
            self.key_of, self.key_ops = kid[order], order
            cited = np.flatnonzero(ev != NONE)
            order = cited[np.argsort(ev[cited], kind="stable")]
            self.ev_of, self.ev_ops = ev[order], order
            self.seqs = seq
        else:
            for i, (k, e, at) in enumerate(zip(kid.tolist(), ev.tolist(), seq.tolist(), strict=True)):
                op = self.upto + i
                self.tail_key.setdefault(k, []).append(op)
                if e != NONE:
                    self.tail_ev.setdefault(e, []).append(op)
                self.tail_seq[at] = op
        self.upto += len(kid)
        return self

    def by_key(self, kid: int) -> list[int]:
        """The key's operations, in log order."""
        a, b = np.searchsorted(self.key_of, [kid, kid + 1])
        ops: list[int] = self.key_ops[a:b].tolist()
        return ops + self.tail_key.get(kid, [])

    def by_ev(self, ev: int) -> list[int]:
        """The operations citing evidence ``ev``, in log order."""
        a, b = np.searchsorted(self.ev_of, [ev, ev + 1])
        ops: list[int] = self.ev_ops[a:b].tolist()
        return ops + self.tail_ev.get(ev, [])

    def by_seq(self, seq: int) -> int | None:
        """The operation that arrived at ``seq`` (None: no operation did)."""
        i = int(np.searchsorted(self.seqs, seq))
        if i < len(self.seqs) and self.seqs[i] == seq:
            return i
        return self.tail_seq.get(seq)
