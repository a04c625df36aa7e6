"""Latency and machine metrics (names.py) from a run's timed calls: each latency's mean and quantiles with their
intervals (the quantiles' from order statistics: how many calls a p90 needs shows here), and the run's
single readings."""

from __future__ import annotations

from k3.eval.metrics import measured
from k3.eval.metrics.names import LATENCIES, STATISTICS


def measures(records, speed: dict, memory: dict) -> dict[str, measured.Measured]:
    """records: the run's RequestRecords; speed: bench's summary (throughput, failures); memory: peak bytes."""
    ok = [r for r in records if r.ok and not r.warmup]
    samples = {"ttft": [r.ttft for r in ok], "ttfvt": [r.ttfvt for r in ok if r.ttfvt is not None],
               "tpot": [r.tpot for r in ok if r.tpot is not None], "e2el": [r.e2el for r in ok],
               "itl": [gap for r in ok for gap in r.itl]}
    out = {}
    for name in LATENCIES:
        values = [v for v in samples[name] if v is not None]
        for stat, q in STATISTICS.items():
            out[f"{name}.{stat}"] = measured.mean(values) if q is None else measured.quantile(values, q)
    out["output_throughput"] = measured.point(speed.get("output_throughput"))
    out["failed"] = measured.point(float(speed.get("failed", 0)))
    if memory.get("peak_rss_bytes"):
        out["peak_rss"] = measured.point(float(memory["peak_rss_bytes"]))
    if memory.get("peak_gpu_memory_bytes"):
        out["peak_gpu_memory"] = measured.point(float(memory["peak_gpu_memory_bytes"]))
    return out
