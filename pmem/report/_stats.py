"""Interval estimates and paired tests used by the report.

Everything here works on counts, never on rows, so the callers can aggregate with Polars first and
hand over a few numbers per group.

>>> lo, hi = wilson(8, 10)
>>> round(lo, 4), round(hi, 4)
(0.4902, 0.9433)
>>> mcnemar_exact(8, 0)
0.0078125
"""

from __future__ import annotations

import math
import zlib

import numpy as np
import polars as pl

#: two-sided 95% normal quantile
Z95 = 1.959963984540054
#: bootstrap resamples per interval
BOOTSTRAP_B = 1000


def wilson(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for k successes out of n (NaNs when n == 0)."""
    if n <= 0:
        return (math.nan, math.nan)
    p = k / n
    denom = 1.0 + z * z / n
    center = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, center - half), min(1.0, center + half))


def with_wilson(data: pl.DataFrame, name: str, k: str, n: str) -> pl.DataFrame:
    """``data`` with the share ``name`` = k / n (null where n is 0) and its Wilson 95% bounds
    ``name_wilson_lo`` and ``name_wilson_hi``, from the count columns ``k`` and ``n``.

    >>> with_wilson(pl.DataFrame({"k": [3, 0], "n": [4, 0]}), "share", "k", "n")["share"].to_list()
    [0.75, None]
    """
    bounds = [wilson(int(a), int(b)) if b else (None, None) for a, b in data.select(k, n).iter_rows()]
    return data.with_columns(
        pl.when(pl.col(n) > 0).then(pl.col(k) / pl.col(n)).alias(name),
        pl.Series(f"{name}_wilson_lo", [lo for lo, _ in bounds], dtype=pl.Float64),
        pl.Series(f"{name}_wilson_hi", [hi for _, hi in bounds], dtype=pl.Float64),
    )


def mcnemar_exact(fixed: int, broken: int) -> float:
    """Two-sided exact McNemar p-value: a binomial(fixed + broken, 1/2) test on the discordant pairs."""
    n = fixed + broken
    if n == 0:
        return 1.0
    m = min(fixed, broken)
    if n <= 1000:
        # exact integer arithmetic: the small counts a report shows ("8-0") get exact p-values
        return min(1.0, 2 * sum(math.comb(n, i) for i in range(m + 1)) / 2**n)
    i = np.arange(m + 1, dtype=np.float64)
    log_terms = math.lgamma(n + 1) - _lgamma(i + 1) - _lgamma(n - i + 1) - n * math.log(2.0)
    top = float(log_terms.max())
    log_tail = top + math.log(float(np.exp(log_terms - top).sum()))
    return min(1.0, 2.0 * math.exp(log_tail))


def _lgamma(x: np.ndarray) -> np.ndarray:
    return np.frompyfunc(math.lgamma, 1, 1)(x).astype(np.float64)


def seed_for(*parts: object) -> int:
    """A stable per-group seed, so an interval does not depend on which other groups exist."""
    return zlib.crc32("\x1f".join(str(p) for p in parts).encode())


def cluster_bootstrap(
    num: np.ndarray,
    den: np.ndarray,
    count: np.ndarray,
    *,
    seed: int,
    b: int = BOOTSTRAP_B,
) -> tuple[float, float]:
    """Percentile interval of sum(num)/sum(den) when whole histories are resampled with replacement.

    The clusters come compressed: ``count[j]`` histories share the per-history totals ``(num[j], den[j])``.
    Histories with equal totals are exchangeable, so drawing how many copies of each pattern a resample
    holds (a multinomial over patterns) is exactly the history bootstrap, at a cost of B x patterns
    instead of B x histories.
    """
    count = np.asarray(count, dtype=np.int64)
    h = int(count.sum())
    if h < 2:
        return (math.nan, math.nan)
    num = np.asarray(num, dtype=np.float64)
    den = np.asarray(den, dtype=np.float64)
    # The draws map to patterns by position: a canonical order makes the interval a function of the
    # patterns alone (Polars' group_by hands them over in a different order in each process).
    order = np.lexsort((count, den, num))
    num, den, count = num[order], den[order], count[order]
    if len(count) == 1:
        r = num[0] / den[0]
        return (r, r)
    rng = np.random.default_rng(seed)
    if h <= 256 and h < 8 * len(count):
        # few histories spread over many patterns: resampling history indices directly is cheaper
        hn, hd = np.repeat(num, count), np.repeat(den, count)
        idx = rng.integers(0, h, size=(b, h))
        tot_den = hd[idx].sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            ratio = hn[idx].sum(axis=1) / tot_den
        ratio = ratio[tot_den > 0]
        if ratio.size == 0:
            return (math.nan, math.nan)
        lo, hi = np.quantile(ratio, [0.025, 0.975])
        return (float(lo), float(hi))
    # multinomial(h, count/h) drawn as a chain of conditional binomials, vectorized over the B resamples
    # (numpy's multinomial loops per resample in Python-visible time; this is ~50x faster for B=2000)
    left = np.full(b, h, dtype=np.int64)
    tot_num = np.zeros(b)
    tot_den = np.zeros(b)
    mass_left = float(h)
    for j in range(len(count) - 1):
        p = min(1.0, count[j] / mass_left) if mass_left > 0 else 0.0
        x = rng.binomial(left, p)
        tot_num += x * num[j]
        tot_den += x * den[j]
        left -= x
        mass_left -= count[j]
    tot_num += left * num[-1]
    tot_den += left * den[-1]
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = tot_num / tot_den
    ratio = ratio[tot_den > 0]
    if ratio.size == 0:
        return (math.nan, math.nan)
    lo, hi = np.quantile(ratio, [0.025, 0.975])
    return (float(lo), float(hi))
