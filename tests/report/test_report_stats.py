"""Interval and test statistics against values worked out by hand."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from pmem.report._stats import cluster_bootstrap, mcnemar_exact, wilson


@pytest.mark.parametrize(
    ("k", "n", "lo", "hi"),
    [
        # p=0.8, z^2=3.8415: center=(0.8+0.19207)/1.38415=0.71681, half=1.95996*sqrt(0.016+0.0096037)/1.38415=0.22661
        (8, 10, 0.4902, 0.9433),
        (9, 10, 0.5958, 0.9821),
        (1, 10, 0.0179, 0.4042),
        # k=0: lower bound 0, upper = z^2/(n+z^2) = 3.8415/8.8415
        (0, 5, 0.0, 0.4345),
        (5, 5, 0.5655, 1.0),
    ],
)
def test_wilson_matches_hand_computed(k: int, n: int, lo: float, hi: float) -> None:
    got = wilson(k, n)
    assert got[0] == pytest.approx(lo, abs=5e-5)
    assert got[1] == pytest.approx(hi, abs=5e-5)


def test_wilson_empty_is_nan_not_zero() -> None:
    assert all(math.isnan(x) for x in wilson(0, 0))


@pytest.mark.parametrize(
    ("fixed", "broken", "p"),
    [
        (8, 0, 2 / 2**8),  # two-sided: 2 * (1/2)^8
        (3, 0, 0.25),
        (5, 1, 2 * (1 + 6) / 64),  # n=6: P(X<=1) = (C(6,0)+C(6,1))/2^6
        (1, 1, 1.0),
        (0, 0, 1.0),
    ],
)
def test_mcnemar_exact_hand_computed(fixed: int, broken: int, p: float) -> None:
    assert mcnemar_exact(fixed, broken) == pytest.approx(p, rel=1e-12)
    assert mcnemar_exact(broken, fixed) == pytest.approx(p, rel=1e-12)


def test_mcnemar_large_n_matches_exact_fraction() -> None:
    fixed, broken = 560, 480
    n = fixed + broken
    exact = float(min(Fraction(1), 2 * Fraction(sum(math.comb(n, i) for i in range(broken + 1)), 2**n)))
    assert mcnemar_exact(fixed, broken) == pytest.approx(exact, rel=1e-9)


def test_cluster_bootstrap_degenerate_when_all_histories_agree() -> None:
    assert cluster_bootstrap(np.array([2]), np.array([4]), np.array([30]), seed=1) == (0.5, 0.5)


def test_cluster_bootstrap_matches_naive_history_resampling() -> None:
    """The compressed-pattern bootstrap has the same distribution as resampling history ids."""
    rng = np.random.default_rng(0)
    num = np.array([0, 1, 2, 3, 5])
    den = np.array([5, 5, 5, 5, 5])
    count = np.array([3, 7, 10, 6, 4])
    lo, hi = cluster_bootstrap(num, den, count, seed=3, b=20000)
    hist_num = np.repeat(num, count)
    hist_den = np.repeat(den, count)
    idx = rng.integers(0, len(hist_num), size=(20000, len(hist_num)))
    ratio = hist_num[idx].sum(1) / hist_den[idx].sum(1)
    nlo, nhi = np.quantile(ratio, [0.025, 0.975])
    assert lo == pytest.approx(nlo, abs=0.01)
    assert hi == pytest.approx(nhi, abs=0.01)
    assert lo < hist_num.sum() / hist_den.sum() < hi


def test_cluster_bootstrap_multinomial_branch_matches_binomial_closed_form() -> None:
    """Histories that are all-right or all-wrong (4 questions each): a resample's ratio is X/h with
    X ~ Binomial(h, share of right histories), whose 2.5% and 97.5% quantiles are known exactly."""
    h, right = 400, 120
    num, den, count = np.array([0, 4]), np.array([4, 4]), np.array([h - right, right])
    assert not (h <= 256 and h < 8 * len(count))  # the multinomial branch, not direct resampling

    def binom_quantile(q: float) -> int:
        p, cdf = right / h, 0.0
        for x in range(h + 1):
            cdf += math.comb(h, x) * p**x * (1 - p) ** (h - x)
            if cdf >= q:
                return x
        return h

    lo, hi = cluster_bootstrap(num, den, count, seed=5, b=20000)
    # the percentile of B draws may fall one atom (1/h) either side of the exact quantile
    assert lo == pytest.approx(binom_quantile(0.025) / h, abs=1.01 / h)
    assert hi == pytest.approx(binom_quantile(0.975) / h, abs=1.01 / h)


@pytest.mark.parametrize("seed", [1, 2])
def test_cluster_bootstrap_multinomial_branch_matches_plain_multinomial(seed: int) -> None:
    """Many histories over few patterns: the chain of conditional binomials is one multinomial draw of
    how many copies of each pattern a resample holds, computed here plainly, one resample at a time."""
    num = np.array([0, 1, 3, 2, 6])
    den = np.array([4, 2, 5, 3, 6])
    count = np.array([60, 90, 40, 70, 40])
    h, b = int(count.sum()), 20000
    assert not (h <= 256 and h < 8 * len(count))
    lo, hi = cluster_bootstrap(num, den, count, seed=seed, b=b)
    rng = np.random.default_rng(100 + seed)
    ratios = []
    for _ in range(b):
        copies = rng.multinomial(h, count / h)
        ratios.append(float(copies @ num) / float(copies @ den))
    ref_lo, ref_hi = np.quantile(ratios, [0.025, 0.975])
    sd = float(np.std(ratios))
    # both are Monte Carlo estimates of the same quantiles: they agree to a small fraction of the spread
    assert lo == pytest.approx(ref_lo, abs=0.1 * sd)
    assert hi == pytest.approx(ref_hi, abs=0.1 * sd)
    assert lo < float(count @ num) / float(count @ den) < hi


@pytest.mark.parametrize("histories", [12, 3000])  # both resampling paths: by history, by pattern
def test_cluster_bootstrap_depends_on_the_patterns_not_their_order(histories: int) -> None:
    """A report's intervals are the same in every process: Polars hands the patterns over in any order."""
    rng = np.random.default_rng(0)
    num, den = np.array([0, 1, 2, 3, 1, 0]), np.array([3, 3, 3, 3, 2, 2])
    count = rng.multinomial(histories, [1 / 6] * 6)
    keep = count > 0
    num, den, count = num[keep], den[keep], count[keep]
    first = cluster_bootstrap(num, den, count, seed=7)
    for _ in range(5):
        order = rng.permutation(len(count))
        assert cluster_bootstrap(num[order], den[order], count[order], seed=7) == first
