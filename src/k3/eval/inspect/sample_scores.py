"""A sample's headline score read from an Inspect log, and whether max_tokens cut its answer: shared by the
report (report.py) and the quality metrics (metrics/quality.py), apart from both, so neither imports the
other."""

from __future__ import annotations


def main_value(score) -> float | None:
    """A score's headline as a number, 1 = good: a dict score's "passed" (or its first value)."""
    v = score.value
    if isinstance(v, dict):
        v = v.get("passed", next(iter(v.values()), None))
    if isinstance(v, str):
        return {"C": 1.0, "I": 0.0, "P": 0.5}.get(v)
    return float(v) if isinstance(v, (int, float)) else None


def first_score(sample):
    return next(iter(sample.scores.values())) if sample.scores else None


def truncated(sample) -> bool:
    """max_tokens cut the sample's last answer. A sample whose output holds no choice (an agent stopped by a
    limit before a model call answered) was not cut: Inspect's stop_reason would raise on it."""
    return bool(sample.output and sample.output.choices and sample.output.stop_reason == "max_tokens")


def main_views(samples) -> dict:
    """The main score's mean both ways: truncated answers left out, and counted as failed (0)."""
    rows = [(main_value(sc), truncated(s)) for s in samples if (sc := first_score(s)) is not None]
    rows = [(v, cut) for v, cut in rows if v is not None]
    kept = [v for v, cut in rows if not cut]
    cut = sum(c for _, c in rows)
    return {"n": len(rows), "truncated": cut,
            "excluding_truncated": sum(kept) / len(kept) if kept else None,
            "truncated_as_failed": sum(0.0 if c else v for v, c in rows) / len(rows) if rows else None}
