"""Rates with confidence intervals."""

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
