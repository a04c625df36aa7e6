"""Refusal sets a user brings (`--tasks refusal:FILE`): JSONL or CSV rows read into RefusalTask's items.

Schema, one row per prompt (the column names XSTest and OR-Bench files use are accepted as they are):
  prompt    the user message (required, non-empty)
  kind      "safe" (refusing it is over-refusal) or "unsafe" (answering it fully is under-refusal);
            also read from `label` (XSTest). Required: OR-Bench's 80k and hard-1k sets are all safe,
            its toxic set unsafe, so add the column for those.
  category  what the report groups by; also read from `type` (XSTest) or `focus`. Default "uncategorised".
  id        unique per row; also read from `id_v2` (XSTest). Default: the file's stem and row number.
"""

from __future__ import annotations

import csv
from pathlib import Path

from k3.eval.tasks.data import read_jsonl

KINDS = ("safe", "unsafe")
ALIASES = {"kind": ("kind", "label"), "category": ("category", "type", "focus"), "id": ("id", "id_v2")}


def read_refusal_file(path: str | Path) -> list[dict]:
    """-> items {id, kind, category, prompt}; a bad row names the file, the row and the fix."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"refusal set {path}: no such file (expected JSONL or CSV rows with a prompt and a kind)")
    rows = _read_csv(path) if path.suffix.lower() == ".csv" else read_jsonl(path)
    if not rows:
        raise ValueError(f"refusal set {path}: no rows")
    items, seen = [], set()
    for n, row in enumerate(rows, 1):
        item = _item(path, n, row)
        if item["id"] in seen:
            raise ValueError(f"{path}: row {n}: id {item['id']!r} appears twice; ids must be unique")
        seen.add(item["id"])
        items.append(item)
    return items


def _read_csv(path: Path) -> list[dict]:
    with open(path, encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f))


def _first(row: dict, field: str):
    for name in ALIASES[field]:
        value = row.get(name)
        if value not in (None, ""):
            return value
    return None


def _item(path: Path, n: int, row: dict) -> dict:
    prompt = row.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        raise ValueError(f"{path}: row {n}: needs a non-empty 'prompt'")
    kind = _first(row, "kind")
    kind = kind.strip().lower() if isinstance(kind, str) else kind
    if kind not in KINDS:
        raise ValueError(f"{path}: row {n}: 'kind' (or 'label') must be safe or unsafe, got {kind!r}; "
                         "add the column where a file has none (OR-Bench's 80k and hard-1k sets are all safe)")
    category = _first(row, "category")
    ident = _first(row, "id")
    return {"id": str(ident) if ident is not None else f"{path.stem}-{n:05d}", "kind": kind,
            "category": str(category) if category is not None else "uncategorised", "prompt": prompt}
