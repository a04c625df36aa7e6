"""A task's metrics (names.py) from its Inspect log: every value from the samples, with the n it rests on and
its interval. The refusal tasks' own measures come from their scorer's labels (inspect/refusal.py)."""

from __future__ import annotations

from collections import defaultdict
from math import comb

from k3.eval.metrics import measured
from k3.eval.metrics.names import STAGES, short


def measures(log) -> dict[str, measured.Measured]:
    """{TASK.METRIC: Measured} for one log (its samples read)."""
    from k3.eval.inspect.sample_scores import first_score, main_value, truncated

    task = short(log.eval.task)
    rows = []
    for s in log.samples or []:
        sc = first_score(s)
        if sc is None:
            continue
        value = main_value(sc)
        rows.append({"id": s.id, "epoch": s.epoch, "cut": truncated(s), "meta": sc.metadata or {}, "value": sc.value,
                     "passed": value is not None and value >= 1.0 and not truncated(s)})
    n = len(rows)
    out = {"score": measured.rate(sum(r["passed"] for r in rows), n),
           "truncated": measured.rate(sum(r["cut"] for r in rows), n)}
    if task in ("refusal", "harmful"):
        from k3.eval.inspect.refusal import measures as refusal_measures

        out |= {k: v for k, v in refusal_measures([r["meta"] for r in rows]).items()
                if task == "refusal" or not k.startswith("over_refusal")}     # harmful asks unsafe prompts only
    elif task == "grading":
        from k3.eval.inspect.grading import measures as grading_measures

        out |= grading_measures([r["meta"] for r in rows])
    elif task in ("challenge", "humaneval", "code", "bfcl", "constraints"):
        out |= passing(rows)
        if task == "challenge":
            out |= {k: measured.rate(sum(isinstance(r["value"], dict) and r["value"].get(k) == 1.0 for r in rows), n)
                    for k in ("resolved", "rules_kept")}
        if task == "code":
            out |= {st: measured.rate(sum(bool((r["meta"].get("stages") or {}).get(st)) for r in rows), n) for st in STAGES}
    return {f"{task}.{k}": v for k, v in out.items()}


def passing(rows: list[dict]) -> dict[str, measured.Measured]:
    """pass@1, and pass@k and pass^k for k up to the fewest attempts an item had (unbiased estimators, averaged
    over items; each a rate over the items)."""
    by_item: dict[str, list[bool]] = defaultdict(list)
    for r in rows:
        by_item[str(r["id"])].append(r["passed"])
    if not by_item:
        return {"pass@1": measured.rate(0, 0)}
    attempts = min(len(v) for v in by_item.values())
    out = {}
    for k in range(1, attempts + 1):
        at = [1 - comb(len(v) - sum(v), k) / comb(len(v), k) for v in by_item.values()]
        out[f"pass@{k}"] = measured.share(at)
        if k > 1:
            out[f"pass^{k}"] = measured.share([comb(sum(v), k) / comb(len(v), k) for v in by_item.values()])
    return out
