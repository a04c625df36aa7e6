"""Built-in task data shipped with k3 (package data under k3/eval/data)."""

from __future__ import annotations

import json
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "data"


def read_jsonl(path: str | Path) -> list[dict]:
    """Rows of a JSONL file; a bad line names the file and line."""
    rows = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{n}: not valid JSON ({e.msg})") from None
            if not isinstance(row, dict):
                raise ValueError(f"{path}:{n}: each line must be a JSON object")
            rows.append(row)
    return rows


def builtin(name: str) -> Path:
    return DATA / name
