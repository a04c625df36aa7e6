"""Token prices for the cost column: USD per million input and output tokens, by model name.

A local model costs nothing to call. For endpoints, pass --prices FILE (JSON:
{"model-name": {"input": 0.6, "output": 2.5}, ...}); unknown models are reported with cost null."""

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


def cost(identity: dict, prompt_tokens: int, completion_tokens: int, table: dict[str, dict]) -> float | None:
    if identity.get("kind") == "local":
        return 0.0
    p = table.get(identity.get("model"))
    if p is None:
        return None
    return (prompt_tokens * p["input"] + completion_tokens * p["output"]) / 1e6
