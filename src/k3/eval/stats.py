"""Rates with confidence intervals, and means with standard errors."""

from __future__ import annotations

import math

Z95 = 1.959964


def wilson(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """95 % Wilson score interval for k successes in n trials ((0, 1) when n = 0). Unlike the normal
    approximation it stays inside [0, 1] and is honest at 0/n and n/n, which small categories hit."""
    if n == 0:
        return 0.0, 1.0
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def rate(k: int, n: int) -> dict:
    lo, hi = wilson(k, n)
    return {"rate": k / n if n else None, "k": k, "n": n, "ci95": [lo, hi]}


def mean_stderr(values: list[float]) -> dict:
    n = len(values)
    if n == 0:
        return {"mean": None, "stderr": None, "n": 0}
    mean = sum(values) / n
    var = sum((v - mean) ** 2 for v in values) / (n - 1) if n > 1 else 0.0
    return {"mean": mean, "stderr": math.sqrt(var / n), "n": n}


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one problem from n samples of which c passed (Chen et al. 2021, eq. 1):
    1 - C(n-c, k) / C(n, k), the chance that k of the n drawn without replacement hold a pass."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@{k} needs 1 <= k <= n and 0 <= c <= n (n={n}, c={c})")
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)
