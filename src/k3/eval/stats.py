"""Estimates with 95 % confidence intervals, and the sample size that would make one decide a threshold.

Rates take Wilson's score interval; quantiles of latencies the distribution-free interval between two order
statistics (the binomial count of samples below the quantile); means Student's t interval. Each is honest
at small n (3 of 3 passing is [0.44, 1], not 1), which is where thresholds get decided wrongly."""

from __future__ import annotations

import math

Z95 = 1.959964
ALPHA = 0.05
# Student's t, two-sided 95 %, by degrees of freedom (1-30); above 30 the normal value is close enough.
T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
       2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)
MAX_N = 10_000_000


def wilson(k: float, n: int, z: float = Z95) -> tuple[float, float]:
    """95 % Wilson score interval for k successes in n trials ((0, 1) when n = 0). Unlike the normal
    approximation it stays inside [0, 1] and is honest at 0/n and n/n, which small categories hit. k may
    be fractional (a mean of per-item values in [0, 1], such as pass@k over items)."""
    if n == 0:
        return 0.0, 1.0
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(max(0.0, p * (1 - p)) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def rate(k: int, n: int) -> dict:
    lo, hi = wilson(k, n)
    return {"rate": k / n if n else None, "k": k, "n": n, "ci95": [lo, hi]}


def _binom_cdfs(n: int, q: float) -> list[float]:
    """[P(Binomial(n, q) <= j) for j in 0..n], summed in log space (n up to a few thousand)."""
    log_q, log_1q, lg = math.log(q), math.log1p(-q), math.lgamma
    out, total = [], 0.0
    for i in range(n + 1):
        total += math.exp(lg(n + 1) - lg(i + 1) - lg(n - i + 1) + i * log_q + (n - i) * log_1q)
        out.append(min(1.0, total))
    return out


EXACT_RANKS = 2000    # above this many samples the binomial is close enough to its normal approximation


def quantile_ranks(n: int, q: float) -> tuple[int | None, int | None]:
    """1-based ranks (r, s) of the order statistics bounding the q-quantile at 95 %: P(x_(r) <= Q_q) >= 0.975
    and P(Q_q <= x_(s)) >= 0.975. None where n samples cannot bound that side at all (too few)."""
    return normal_ranks(n, q) if n > EXACT_RANKS else exact_ranks(n, q)


def normal_ranks(n: int, q: float) -> tuple[int | None, int | None]:
    """quantile_ranks by the binomial's normal approximation (large n), rounded outwards: never narrower."""
    half = Z95 * math.sqrt(n * q * (1 - q))
    r, s = math.floor(n * q - half), math.ceil(n * q + half) + 1
    return (r if r >= 1 else None), (s if s <= n else None)


def exact_ranks(n: int, q: float) -> tuple[int | None, int | None]:
    """quantile_ranks from the exact binomial (the reference; O(n) a call)."""
    cdf = _binom_cdfs(n, q)
    below = lambda j: cdf[j] if j >= 0 else 0.0          # noqa: E731  P(B <= j)
    # r: the largest with P(B >= r) >= 0.975; s: the smallest with P(B <= s - 1) >= 0.975
    r = next((i for i in range(n, 0, -1) if 1.0 - below(i - 1) >= 1 - ALPHA / 2), None)
    s = next((i for i in range(1, n + 1) if below(i - 1) >= 1 - ALPHA / 2), None)
    return r, s


def quantile_interval(values: list[float], q: float) -> tuple[float | None, float | None]:
    """95 % interval of the q-quantile from the sample (None: unbounded on that side with this few samples)."""
    xs = sorted(values)
    r, s = quantile_ranks(len(xs), q)
    return (xs[r - 1] if r else None), (xs[s - 1] if s else None)


def mean_interval(values: list[float]) -> tuple[float | None, float | None]:
    n = len(values)
    if n < 2:
        return None, None
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = (T95[n - 2] if n - 1 <= len(T95) else Z95) * sd / math.sqrt(n)
    return mean - half, mean + half


def needed_for_rate(p: float, threshold: float) -> int | None:
    """The smallest n at which a rate of `p` would have a Wilson interval that excludes `threshold` (so a
    requirement on it is decided either way), or None when no n does (p on the threshold)."""
    if p == threshold:
        return None
    return _smallest(lambda n: not (wilson(p * n, n)[0] <= threshold <= wilson(p * n, n)[1]))


def needed_for_quantile(values: list[float], q: float, threshold: float) -> int | None:
    """The smallest n at which samples distributed as `values` would bound the q-quantile away from
    `threshold` (its interval entirely on one side), or None when they never would."""
    below = sum(v <= threshold for v in values) / len(values) if values else 0.0
    if below == q or not values:
        return None

    def decided(n: int) -> bool:
        r, s = quantile_ranks(n, q)
        count = below * n
        return (s is not None and s <= count) or (r is not None and r > count)

    return _smallest(decided)


def needed_for_mean(values: list[float], threshold: float) -> int | None:
    n = len(values)
    if n < 2:
        return None
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    if mean == threshold:
        return None
    return max(n + 1, math.ceil((Z95 * sd / abs(mean - threshold)) ** 2) + 1)


def _smallest(decided) -> int | None:
    """The smallest n >= 1 for which decided(n) holds, assuming it stays true once true; None past MAX_N."""
    hi = 1
    while not decided(hi):
        hi *= 2
        if hi > MAX_N:
            return None
    lo = hi // 2
    while lo + 1 < hi:
        mid = (lo + hi) // 2
        if decided(mid):
            hi = mid
        else:
            lo = mid
    return hi
