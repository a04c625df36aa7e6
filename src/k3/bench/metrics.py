"""Aggregate metrics over request records, named and defined as vLLM's `bench serve` where they overlap.

TTFT: send -> first token. TPOT: (e2el - ttft) / (output tokens - 1), per request, first token
excluded. ITL: gaps between successive streamed chunks, pooled over requests. E2EL: send -> last
token. TTFVT: send -> first non-reasoning token (always-thinking models). Throughputs divide by the
benchmark's duration (first send to last completion, warm-up excluded). Goodput: requests per second
that met every SLO given. Percentiles are numpy's (linear interpolation). Times are reported in ms.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from k3.bench.records import RequestRecord

PERCENTILES = (50, 90, 99)


def distribution(values: list[float]) -> dict:
    """{mean, std, p50, p90, p99} in milliseconds; None entries when there is no value."""
    if not values:
        return {"mean": None, "std": None} | {f"p{p}": None for p in PERCENTILES}
    arr = np.asarray(values, dtype=np.float64) * 1000.0
    return ({"mean": float(arr.mean()), "std": float(arr.std())}
            | {f"p{p}": float(np.percentile(arr, p)) for p in PERCENTILES})


VLLM_LATENCIES = ("ttft", "tpot", "itl", "e2el")


def vllm_keys(result: dict, num_prompts: int) -> dict:
    """The flat keys of `vllm bench serve`'s result JSON, from k3's nested ones (same definitions):
    num_prompts, duration, and mean/median/std/p90/p99 of TTFT, TPOT, ITL and E2EL in ms."""
    flat = {"num_prompts": num_prompts, "duration": result["duration_s"]}
    for name in VLLM_LATENCIES:
        d = result[f"{name}_ms"]
        flat |= {f"mean_{name}_ms": d["mean"], f"median_{name}_ms": d["p50"], f"std_{name}_ms": d["std"],
                 f"p90_{name}_ms": d["p90"], f"p99_{name}_ms": d["p99"]}
    return flat


def meets(r: RequestRecord, slos: dict[str, float]) -> bool:
    """slos: metric -> limit in ms, for ttft, tpot, e2el, ttfvt (as vLLM's --goodput)."""
    for name, limit in slos.items():
        value = getattr(r, name)
        if value is None and name == "tpot":
            continue  # a one-token answer has no TPOT (vLLM treats it as met)
        if value is None or value * 1000.0 > limit:
            return False
    return True


def summarize(records: list[RequestRecord], duration: float, slos: dict[str, float] | None = None) -> dict:
    counted = [r for r in records if not r.warmup]
    ok = [r for r in counted if r.ok]
    failed = [r for r in counted if not r.ok]
    out_tokens = sum(r.output_tokens for r in ok)
    in_tokens = sum(r.prompt_tokens for r in ok)
    result = {
        "completed": len(ok), "failed": len(failed),
        "failure_reasons": dict(Counter((r.error or "incomplete")[:120] for r in failed)),
        "duration_s": duration,
        "total_input_tokens": in_tokens, "total_output_tokens": out_tokens,
        "reasoning_tokens": sum(r.reasoning_tokens for r in ok),
        "no_visible_output": sum(r.first_visible is None for r in ok),  # all reasoning (truncated thinking)
        "request_throughput": len(ok) / duration if duration > 0 else 0.0,
        "output_throughput": out_tokens / duration if duration > 0 else 0.0,
        "total_token_throughput": (in_tokens + out_tokens) / duration if duration > 0 else 0.0,
        "ttft_ms": distribution([r.ttft for r in ok]),
        "tpot_ms": distribution([r.tpot for r in ok if r.tpot is not None]),
        "itl_ms": distribution([gap for r in ok for gap in r.itl]),
        "e2el_ms": distribution([r.e2el for r in ok]),
        "ttfvt_ms": distribution([r.ttfvt for r in ok if r.ttfvt is not None]),
    }
    result |= vllm_keys(result, len(counted))
    if slos:
        good = [r for r in ok if meets(r, slos)]
        result["goodput"] = len(good) / duration if duration > 0 else 0.0
        result["slos_ms"] = dict(slos)
        result["good_requests"] = len(good)
    return result


def by_tag(records: list[RequestRecord], key: str) -> dict:
    """Per value of one workload tag (e.g. context length): TTFT and TPOT distributions."""
    groups: dict = {}
    for r in records:
        if r.ok and not r.warmup and key in r.tag:
            groups.setdefault(r.tag[key], []).append(r)
    return {v: {"requests": len(rs), "ttft_ms": distribution([r.ttft for r in rs]),
                "tpot_ms": distribution([r.tpot for r in rs if r.tpot is not None])}
            for v, rs in sorted(groups.items())}
