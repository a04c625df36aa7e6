"""Token prices for the cost column: USD per million input and output tokens, by model name.

A local model costs nothing to call. For endpoints, pass `k3 eval --prices FILE` (JSON:
{"model-name": {"input": 0.6, "output": 2.5}, ...}); a model without a price is reported with cost null."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path


def load_prices(path: str | None) -> dict[str, dict]:
    if path is None:
        return {}
    try:
        table = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"--prices {path}: cannot read a JSON price table ({e})") from None
    for model, p in table.items():
        if not (isinstance(p, dict) and isinstance(p.get("input"), (int, float)) and isinstance(p.get("output"), (int, float))):
            raise ValueError(f"--prices {path}: {model!r} needs numeric \"input\" and \"output\" (USD per million tokens)")
    return table


def cost(model: str, input_tokens: int, output_tokens: int, table: dict[str, dict]) -> float | None:
    """USD for one model's tokens (Inspect's model name: `k3/PATH` runs in-process and costs nothing; an
    endpoint's `openai-api/k3/NAME` is priced by NAME or the full name); None without a price."""
    if model.startswith(("k3/", "k3agent/")):      # in-process, or a scripted agent: no model is paid for
        return 0.0
    p = table.get(model) or table.get(model.split("/")[-1])
    if p is None:
        return None
    return (input_tokens * p["input"] + output_tokens * p["output"]) / 1e6


def usage(samples, table: dict) -> dict:
    """Tokens of Inspect samples (their `model_usage`) by model, in all, and their cost (None when a model
    has no price)."""
    by_model: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for s in samples:
        for model, u in (s.model_usage or {}).items():
            by_model[model][0] += u.input_tokens
            by_model[model][1] += u.output_tokens
    costs = [cost(m, i, o, table) for m, (i, o) in by_model.items()]
    return {"input_tokens": sum(i for i, _ in by_model.values()), "output_tokens": sum(o for _, o in by_model.values()),
            "by_model": {m: {"input_tokens": i, "output_tokens": o} for m, (i, o) in by_model.items()},
            "cost_usd": None if None in costs else sum(costs)}
