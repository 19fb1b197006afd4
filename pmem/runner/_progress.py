"""Live progress of a sweep: one line that fits the terminal, and a progress log in the run directory.

On a terminal the line rewrites itself in place (``\\r``); elsewhere (files, CI, ``ray job logs``) a new
line is printed every ``progress_s`` seconds. Either way no line is wider than the terminal (``COLUMNS``,
else the stream's terminal, else 80): the fields come most important first (histories done/total,
failures, rate, ETA, then model calls, tokens, elapsed) and those that do not fit give way to ``…``.
Notes (an arm not run, a runner lost) and details are wrapped to the width instead: their words matter.

The details (histories done per subset and arm, the runners' event-loop stalls, how the work is spread)
go to the run's progress log (:data:`pmem.rundir.PROGRESS_LOG`) and, with ``pmem sweep --verbose``, to
the terminal as well.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import sys
import textwrap
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

#: the tag a line starts with when the width leaves room for it
PREFIX = "[pmem sweep] "
SEPARATOR = " | "
#: what stands for the fields (or the end of a field) that did not fit
ELLIPSIS = "…"
#: the width when none is known (not a terminal and no COLUMNS)
DEFAULT_WIDTH = 80
#: how often a terminal's line is redrawn at most: a sweep can finish hundreds of histories a second
REDRAW_S = 0.2
#: fields that keep the tag beside them: at a narrow width the counts matter more than the tag
_ESSENTIAL_FIELDS = 4


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


def _rate(per_s: float | None) -> str:
    """Histories per second, or per minute (per hour) when fewer than one a second (a minute)."""
    if per_s is None:
        return "?/s"
    if per_s >= 1:
        value, unit = per_s, "s"
    elif per_s * 60 >= 1:
        value, unit = per_s * 60, "min"
    else:
        value, unit = per_s * 3600, "h"
    return f"{value:.0f}/{unit}" if value >= 100 else f"{value:.1f}/{unit}"


def terminal_width(stream: TextIO | None = None) -> int:
    """Columns of the terminal: ``COLUMNS`` when set, else the terminal ``stream`` writes to, else
    :data:`DEFAULT_WIDTH`. The stream is asked first (not stdout as :func:`shutil.get_terminal_size` does),
    since ``pmem sweep CONFIG | tail -n 1`` pipes stdout while stderr, where progress goes, is the terminal.
    """
    env = os.environ.get("COLUMNS", "")
    if env.strip().isdigit() and int(env) > 0:
        return int(env)
    if stream is not None:
        with contextlib.suppress(AttributeError, OSError, ValueError, io.UnsupportedOperation):
            columns = os.get_terminal_size(stream.fileno()).columns
            if columns > 0:
                return columns
    return shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns or DEFAULT_WIDTH


def wrap_lines(lines: Iterable[str], width: int) -> list[str]:
    """``lines`` wrapped (not cut) to ``width``, continuations indented: what a note or a detail says is
    read whole, and no line of it is wider than the terminal but one holding a word longer than the
    width (a path is never split).

    >>> wrap_lines(["[pmem sweep] not run: mem0 (12 histories): needs a model"], 40)
    ['[pmem sweep] not run: mem0 (12', '    histories): needs a model']
    """
    width = max(20, width)
    return [
        part
        for line in lines
        for part in textwrap.wrap(
            line, width, subsequent_indent="    ", break_on_hyphens=False, break_long_words=False
        )
        or [""]
    ]


def fit_line(fields: Sequence[str], width: int, *, prefix: str = PREFIX) -> str:
    """``prefix`` and ``fields`` (most important first) joined into a line of at most ``width`` characters.

    Fields that do not fit are left out from the last one on, and ``…`` says so; the prefix is left out
    when the first few fields would not fit beside it; a first field that does not fit alone is cut.

    >>> fields = ["120/4368 histories (3%)", "0 failed", "85.3/s", "ETA 51s", "calls 1.2k (0 cached)"]
    >>> fit_line(fields, 100)
    '[pmem sweep] 120/4368 histories (3%) | 0 failed | 85.3/s | ETA 51s | calls 1.2k (0 cached)'
    >>> fit_line(fields, 70)
    '[pmem sweep] 120/4368 histories (3%) | 0 failed | 85.3/s | ETA 51s | …'
    >>> fit_line(fields, 40)
    '120/4368 histories (3%) | 0 failed | …'
    >>> fit_line(fields, 12)
    '120/4368 hi…'
    """
    width = max(1, width)

    def join(pre: str, parts: Sequence[str]) -> str:
        return pre + SEPARATOR.join(parts)

    marker = len(SEPARATOR + ELLIPSIS) if len(fields) > _ESSENTIAL_FIELDS else 0
    pre = prefix if len(join(prefix, fields[:_ESSENTIAL_FIELDS])) + marker <= width else ""
    whole = join(pre, fields)
    if len(whole) <= width:
        return whole
    # some field goes: keep room for the marker that says so
    room = width - len(SEPARATOR + ELLIPSIS)
    kept: list[str] = []
    for f in fields:
        if len(join(pre, [*kept, f])) > room:
            break
        kept.append(f)
    if kept:
        return join(pre, kept) + SEPARATOR + ELLIPSIS
    return (pre + fields[0])[: width - len(ELLIPSIS)] + ELLIPSIS if fields else pre[:width]


class LogFile:
    """A text log that each line is appended to with its time (the run's progress log).

    The file is opened for each write, so it may be written before and after a :class:`Progress` lives
    (the driver's notes, the judging pass). A write that fails (a full disk) is said once on ``warn`` and
    the log stops; the sweep goes on.
    """

    def __init__(self, path: Path | None = None, *, warn: TextIO | None = None) -> None:
        self.path = path
        self.warn = warn

    def write(self, lines: Iterable[str]) -> None:
        if self.path is None:
            return
        stamp = datetime.now().astimezone().isoformat(timespec="seconds")
        text = "".join(f"{stamp} {line}\n" for line in lines)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as f:
                f.write(text)
        except OSError as exc:
            print(
                f"[pmem sweep] cannot write {self.path}: {exc}; no more progress log",
                file=self.warn or sys.stderr,
            )
            self.path = None


class Progress:
    """Counts histories done / total per (subset, arm), model calls, tokens and failures; shows an ETA.

    ``calls``, ``cached`` and ``tokens`` are those of returned histories; the line adds the calls so far
    of histories still running (:meth:`set_live`, from the runners' stats), so a sweep of a few long
    histories does not show ``calls=0`` until the first one ends.

    ``stream`` gets the line (rewritten in place when ``tty``, else every ``interval`` seconds) and the
    notes, unless ``enabled`` is false; the details (:meth:`detail`, the counts per subset and arm) only
    when ``verbose``. ``log`` gets everything, every ``interval`` seconds, whatever the stream shows.
    ``width`` fixes the terminal's width (default: :func:`terminal_width`, asked at each line, so a
    resized terminal is followed); ``clock`` gives the seconds that rates and the ETA are measured in.
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
        verbose: bool = False,
        width: int | None = None,
        log: LogFile | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.clock = clock
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.enabled = enabled
        self.verbose = verbose
        self.width = width
        self.log = log or LogFile()
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
        self.t0 = self.clock()
        self.interval = interval
        self._last = -float("inf")  # the last periodic line (and log snapshot)
        self._last_draw = -float("inf")  # the last redraw of a terminal's line
        self._drawn = 0  # characters of the line now on the terminal (0: none)

    def restart_clock(self) -> None:
        """Measure rates from now (after the runners started), so the ETA ignores start-up."""
        self.t0 = self.clock()
        self.start_done = self.n_done

    @property
    def n_done(self) -> int:
        return sum(self.done.values())

    @property
    def n_failed(self) -> int:
        return sum(self.failed.values())

    def rate(self) -> float | None:
        """Histories per second since :meth:`restart_clock` (None before the first one)."""
        run = self.n_done - self.start_done
        if run <= 0:
            return None
        return run / max(1e-9, self.clock() - self.t0)

    def eta(self) -> float | None:
        rate = self.rate()
        return None if rate is None else (self.total - self.n_done) / rate

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
        self.tick()

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
        self.tick()

    # -- what is shown ---------------------------------------------------------------------------------

    def fields(self) -> list[str]:
        """The line's fields, most important first."""
        pct = 100.0 * self.n_done / self.total if self.total else 100.0
        eta = self.eta()
        return [
            f"{self.n_done}/{self.total} histories ({pct:.0f}%)",
            f"{self.n_failed} failed",
            _rate(self.rate()),
            f"ETA {'?' if eta is None else _dur(eta)}",
            f"calls {_human(self.calls + self.live_calls)} ({_human(self.cached + self.live_cached)} cached)",
            f"tokens {_human(self.tokens + self.live_tokens)}",
            f"elapsed {_dur(self.clock() - self.t0)}",
        ]

    def line(self, width: int | None = None) -> str:
        """The progress line at most ``width`` characters wide (every field when None: the log's line)."""
        fields = self.fields()
        return PREFIX + SEPARATOR.join(fields) if width is None else fit_line(fields, width)

    def group_lines(self) -> list[str]:
        """Histories done per arm, one line per subset (the detail the line leaves out)."""
        by_subset: dict[str, list[str]] = defaultdict(list)
        for (subset, arm), tot in sorted(self.totals.items()):
            f = self.failed.get((subset, arm), 0)
            by_subset[subset].append(
                f"{arm} {self.done.get((subset, arm), 0)}/{tot}" + (f" ({f} failed)" if f else "")
            )
        return [f"{subset}: {', '.join(parts)}" for subset, parts in by_subset.items()]

    def _width(self) -> int:
        return self.width if self.width is not None else terminal_width(self.stream)

    def _wrapped(self, lines: Iterable[str]) -> list[str]:
        """Note and detail lines wrapped (not cut: they are what was asked for) to the terminal's width."""
        return wrap_lines(lines, self._width() - (1 if self.tty else 0))

    def _print(self, lines: Iterable[str]) -> None:
        """Whole lines on the stream, above a terminal's progress line (which is redrawn after them)."""
        redraw = self._drawn > 0
        self._clear()
        for line in lines:
            print(line, file=self.stream)
        self.stream.flush()
        if redraw:
            self._draw()

    def _clear(self) -> None:
        if self._drawn:
            self.stream.write("\r" + " " * self._drawn + "\r")
            self._drawn = 0

    def _draw(self) -> None:
        # one column short of the width: a character in the last column makes some terminals wrap
        text = self.line(max(1, self._width() - 1))
        self.stream.write("\r" + text + " " * max(0, self._drawn - len(text)))
        self.stream.flush()
        self._drawn = len(text)
        self._last_draw = self.clock()

    def note(self, text: str) -> None:
        """An event the user should see (a runner died, an arm not run): the stream and the log."""
        self.log.write([text])
        if self.enabled:
            self._print(self._wrapped([text]))

    def detail(self, text: str) -> None:
        """A detail (how the work is spread, event-loop stalls): the log, and the stream when verbose."""
        self.log.write([text])
        if self.enabled and self.verbose:
            self._print(self._wrapped([text]))

    def tick(self, force: bool = False) -> None:
        """Every ``interval`` seconds (or when forced): a snapshot to the log, a line to a stream that is
        not a terminal, the counts per subset and arm when verbose. A terminal's line is redrawn at most
        every :data:`REDRAW_S`."""
        now = self.clock()
        if force or now - self._last >= self.interval:
            self._last = now
            groups = [f"  {g}" for g in self.group_lines()]
            self.log.write([self.line(), *groups])
            if self.enabled and not self.tty:
                self._print([self.line(self._width()), *(self._wrapped(groups) if self.verbose else [])])
            elif self.enabled and self.verbose:
                self._print(self._wrapped(groups))
        if self.enabled and self.tty and self.total and (force or now - self._last_draw >= REDRAW_S):
            self._draw()

    def close(self) -> None:
        """The final line (and snapshot); a terminal's line is left in place, ended."""
        self.tick(force=True)
        if self._drawn:
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = 0
