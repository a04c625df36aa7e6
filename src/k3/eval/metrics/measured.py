"""One measured value: the estimate, the n it rests on, its 95 % interval, and enough of the sample to say what
n would decide a threshold on it."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from k3.eval import stats

KINDS = ("rate", "quantile", "mean", "point")


@dataclass(frozen=True)
class Measured:
    value: float | None          # None: nothing measurable (n = 0)
    n: int                       # the answers, items or calls it rests on
    kind: str                    # rate (of n), quantile or mean (of n values), point (a single reading)
    low: float | None = None     # the 95 % interval; None on a side that this n cannot bound
    high: float | None = None
    k: float | None = None       # rate: the count of n (fractional for a mean of per-item shares)
    q: float | None = None       # quantile: its level
    values: tuple = field(default=(), repr=False, compare=False)   # quantile, mean: the sample

    def to_dict(self) -> dict:
        out = {"value": self.value, "n": self.n, "kind": self.kind, "ci95": [self.low, self.high]}
        return out | ({"k": self.k} if self.k is not None else {})

    def needed(self, threshold: float) -> int | None:
        """The n at which a value like this one would have an interval clear of `threshold`; None: never."""
        if self.kind == "rate" and self.value is not None:
            return stats.needed_for_rate(self.value, threshold)
        if self.kind == "quantile" and self.values:
            return stats.needed_for_quantile(list(self.values), self.q, threshold)
        if self.kind == "mean" and self.values:
            return stats.needed_for_mean(list(self.values), threshold)
        return None


def rate(k: float, n: int) -> Measured:
    """k of n (k may be a sum of per-item shares in [0, 1]); Wilson's interval."""
    lo, hi = stats.wilson(k, n)
    return Measured(k / n if n else None, n, "rate", lo if n else None, hi if n else None, k=k)


def share(values: list[float]) -> Measured:
    """The mean of per-item values in [0, 1] (pass@k over items) as a rate over the items."""
    return rate(sum(values), len(values))


def quantile(values: list[float], q: float) -> Measured:
    """The q-quantile (numpy's linear interpolation, as `k3 bench` reports it) and its order-statistic interval."""
    if not values:
        return Measured(None, 0, "quantile", q=q)
    import numpy as np

    lo, hi = stats.quantile_interval(values, q)
    return Measured(float(np.percentile(values, 100 * q)), len(values), "quantile", lo, hi, q=q, values=tuple(values))


def mean(values: list[float]) -> Measured:
    if not values:
        return Measured(None, 0, "mean")
    lo, hi = stats.mean_interval(values)
    return Measured(sum(values) / len(values), len(values), "mean", lo, hi, values=tuple(values))


def point(value: float | None) -> Measured:
    """A single reading (peak memory, a count, a throughput over the run): decided on its value."""
    ok = value is not None and math.isfinite(value)
    return Measured(float(value) if ok else None, 1 if ok else 0, "point", value if ok else None, value if ok else None)


def as_floats(found: dict[str, Measured]) -> dict[str, float]:
    """Measures as an Inspect metric's flat numbers: NAME, NAME_n, NAME_ci95_low, NAME_ci95_high (NaN where there
    is nothing: Inspect's numbers cannot be None)."""
    nan = float("nan")
    out = {}
    for name, m in found.items():
        out |= {name: nan if m.value is None else m.value, f"{name}_n": float(m.n),
                f"{name}_ci95_low": nan if m.low is None else m.low, f"{name}_ci95_high": nan if m.high is None else m.high}
    return out
