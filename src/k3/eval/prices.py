"""Token prices for the cost column: USD per million input and output tokens, by model name.

A local model costs nothing to call. For endpoints, pass `k3 eval --prices FILE` (JSON:
{"model-name": {"input": 0.6, "output": 2.5}, ...}); a model without a price is reported with cost null."""

from __future__ import annotations

import json
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
