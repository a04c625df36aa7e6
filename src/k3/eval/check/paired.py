"""Two runs of the same items, compared: scores with a paired test (McNemar's exact test when every score
is pass/fail, a paired bootstrap of the mean difference otherwise), latencies side by side. Items pair by
(task, id, epoch); an item only one side finished is left out and counted."""

from __future__ import annotations

import math

import numpy as np

ALPHA = 0.05
LATENCY_KEYS = ("ttft_ms", "ttfvt_ms", "tpot_ms", "itl_ms", "e2el_ms")


def mcnemar(a: list[float], b: list[float]) -> dict:
    """Exact two-sided McNemar on paired pass/fail: p = P(a binomial(n, 1/2) is as far from n/2 as the
    discordant split), n the pairs where exactly one side passed."""
    only_a = sum(1 for x, y in zip(a, b) if x == 1 and y == 0)
    only_b = sum(1 for x, y in zip(a, b) if x == 0 and y == 1)
    n = only_a + only_b
    tail = sum(math.comb(n, k) for k in range(min(only_a, only_b) + 1)) / 2 ** n if n else 1.0
    return {"test": "mcnemar-exact", "a_only_passed": only_a, "b_only_passed": only_b, "p_value": min(1.0, 2 * tail)}


def paired_bootstrap(a: list[float], b: list[float], rounds: int = 10_000, seed: int = 0) -> dict:
    """The mean of b - a with a 95 % interval from resampling the pairs; p: twice the share of resampled
    means on the far side of zero."""
    d = np.asarray(b, dtype=np.float64) - np.asarray(a, dtype=np.float64)
    rng = np.random.default_rng(seed)
    means = d[rng.integers(0, len(d), size=(rounds, len(d)))].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    if np.all(d == 0):
        p = 1.0
    else:
        p = min(1.0, 2 * min((means <= 0).mean(), (means >= 0).mean()))
    return {"test": "paired-bootstrap", "ci95": [float(low), float(high)], "p_value": float(p)}


def compare_scores(items_a: list[dict], items_b: list[dict]) -> dict:
    """Per task: the paired items' means and the test of their difference."""
    key = lambda it: (it["task"], str(it["id"]), it["epoch"])      # noqa: E731
    b_by = {key(it): it for it in items_b if it["score"] is not None}
    out: dict = {}
    for task in sorted({it["task"] for it in items_a}):
        pairs = [(it["score"], b_by[key(it)]["score"]) for it in items_a
                 if it["task"] == task and it["score"] is not None and key(it) in b_by]
        unpaired = sum(1 for it in items_a + items_b if it["task"] == task) - 2 * len(pairs)
        if not pairs:
            out[task] = {"pairs": 0, "unpaired": unpaired}
            continue
        a, b = [float(x) for x, _ in pairs], [float(y) for _, y in pairs]
        binary = all(v in (0.0, 1.0) for v in a + b)
        test = mcnemar(a, b) if binary else paired_bootstrap(a, b)
        out[task] = {"pairs": len(pairs), "unpaired": unpaired, "a_mean": sum(a) / len(a), "b_mean": sum(b) / len(b),
                     "difference": (sum(b) - sum(a)) / len(a), **test, "significant": test["p_value"] < ALPHA}
    return out


def compare_latency(speed_a: dict, speed_b: dict) -> dict:
    """Each latency's distribution for both sides, and B's over A's at each percentile."""
    out = {}
    for k in LATENCY_KEYS:
        a, b = speed_a.get(k) or {}, speed_b.get(k) or {}
        ratio = {p: (b[p] / a[p] if a.get(p) and b.get(p) is not None else None) for p in ("p50", "p90", "p99")}
        out[k] = {"a": a, "b": b, "b_over_a": ratio}
    return out
