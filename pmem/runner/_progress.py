"""Live progress of a sweep: a tqdm bar on a terminal, plain log lines otherwise (files, `ray job logs`)."""

from __future__ import annotations

import sys
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any, TextIO


def _human(n: float) -> str:
    for unit, div in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= div:
            return f"{n / div:.1f}{unit}"
    return f"{int(n)}"


def _dur(s: float) -> str:
    s = int(max(0, s))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}h{m:02d}m" if h else (f"{m}m{sec:02d}s" if m else f"{sec}s")


class Progress:
    """Counts histories done / total per (subset, arm), model calls, tokens and failures; shows an ETA.

    ``calls``, ``cached`` and ``tokens`` are those of returned histories; the line adds the calls so far
    of histories still running (:meth:`set_live`, from the runners' stats), so a sweep of a few long
    histories does not show ``calls=0`` until the first one ends.
    """

    def __init__(
        self,
        totals: dict[tuple[str, str], int],
        already: dict[tuple[str, str], int],
        *,
        interval: float = 10.0,
        stream: TextIO | None = None,
        tty: bool | None = None,
        enabled: bool = True,
    ) -> None:
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.enabled = enabled
        self.totals = dict(totals)
        self.done: dict[tuple[str, str], int] = defaultdict(int, already)
        self.failed: dict[tuple[str, str], int] = defaultdict(int)
        self.total = sum(totals.values())
        self.start_done = sum(already.values())
        self.calls = 0
        self.cached = 0
        self.tokens = 0
        self.redone = 0
        self.exec_s = 0.0
        #: runner -> unit id -> (calls, tokens, cached calls) of its histories not yet returned
        self._live: dict[int, dict[str, tuple[int, int, int]]] = {}
        #: units whose summary was counted: a runner's figure for one of them is stale (taken before it returned)
        self._returned: set[str] = set()
        self.t0 = time.monotonic()
        self.interval = interval
        self._last = 0.0
        self._bar: Any = None
        if self.enabled and self.tty and self.total:
            from tqdm import tqdm

            self._bar = tqdm(
                total=self.total,
                initial=self.start_done,
                unit="hist",
                file=self.stream,
                dynamic_ncols=True,
                desc="sweep",
            )

    def restart_clock(self) -> None:
        """Measure rates from now (after the runners started), so the ETA ignores start-up."""
        self.t0 = time.monotonic()
        self.start_done = self.n_done

    @property
    def n_done(self) -> int:
        return sum(self.done.values())

    @property
    def n_failed(self) -> int:
        return sum(self.failed.values())

    def eta(self) -> float | None:
        run = self.n_done - self.start_done
        if run <= 0:
            return None
        rate = run / max(1e-9, time.monotonic() - self.t0)
        return (self.total - self.n_done) / rate

    def _live_sum(self, i: int) -> int:
        return sum(v[i] for units in self._live.values() for v in units.values())

    @property
    def live_calls(self) -> int:
        """Model calls so far of the histories still running."""
        return self._live_sum(0)

    @property
    def live_tokens(self) -> int:
        return self._live_sum(1)

    @property
    def live_cached(self) -> int:
        return self._live_sum(2)

    def set_live(self, runner: int, units: Mapping[str, Sequence[int]]) -> None:
        """A runner's latest figures (unit id -> calls, tokens, cached calls) for its histories in flight;
        replaces what it reported before. Units whose summary was already counted are left out."""
        self._live[runner] = {
            uid: (int(v[0]), int(v[1]), int(v[2])) for uid, v in units.items() if uid not in self._returned
        }
        if self._bar is not None:
            self._bar.set_postfix_str(self._postfix(), refresh=True)

    def _postfix(self) -> str:
        calls, tokens = self.calls + self.live_calls, self.tokens + self.live_tokens
        return f"calls={_human(calls)} tok={_human(tokens)} failed={self.n_failed}"

    def update(self, group: tuple[str, str], summary: dict[str, Any]) -> None:
        self.done[group] += 1
        if summary.get("status") == "failed":
            self.failed[group] += 1
        self.calls += int(summary.get("calls") or 0)
        self.cached += int(summary.get("cached") or 0)
        self.tokens += int(summary.get("tokens") or 0)
        uid = summary.get("uid")
        if uid is not None:
            # its calls are counted now: drop them from the live figures, now and in any older report
            self._returned.add(uid)
            for units in self._live.values():
                units.pop(uid, None)
        if self._bar is not None:
            self._bar.update(1)
            self._bar.set_postfix_str(self._postfix(), refresh=False)
        self.tick()

    def note(self, text: str) -> None:
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.write(text, file=self.stream)
        else:
            print(text, file=self.stream, flush=True)

    def line(self) -> str:
        eta = self.eta()
        elapsed = time.monotonic() - self.t0
        pct = 100.0 * self.n_done / self.total if self.total else 100.0
        head = (
            f"[pmem sweep] {self.n_done}/{self.total} histories ({pct:.0f}%) failed={self.n_failed} "
            f"calls={_human(self.calls + self.live_calls)} (cached {_human(self.cached + self.live_cached)}) "
            f"tokens={_human(self.tokens + self.live_tokens)} "
            f"elapsed={_dur(elapsed)} ETA={'?' if eta is None else _dur(eta)}"
        )
        by_subset: dict[str, list[str]] = defaultdict(list)
        for (subset, arm), tot in sorted(self.totals.items()):
            f = self.failed.get((subset, arm), 0)
            by_subset[subset].append(
                f"{arm} {self.done.get((subset, arm), 0)}/{tot}" + (f" ({f} failed)" if f else "")
            )
        groups = "; ".join(f"{s}: {', '.join(parts)}" for s, parts in by_subset.items())
        return f"{head} | {groups}"

    def tick(self, force: bool = False) -> None:
        if not self.enabled or self._bar is not None:
            return
        now = time.monotonic()
        if force or now - self._last >= self.interval:
            self._last = now
            print(self.line(), file=self.stream, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
            if self.enabled:
                print(self.line(), file=self.stream, flush=True)
        else:
            self.tick(force=True)
