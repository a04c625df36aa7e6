"""gen:FILE -- generation tasks scored by exact match.

JSONL rows {"id", "prompt" (or "messages"), "answer" (a string or a list of accepted strings),
optional "extract": a regex whose first group is the model's answer (default: the whole reply),
optional "match": "exact" (default, after stripping and lower-casing) or "contains"}. Truncated
replies are flagged and left out of the score.
"""

from __future__ import annotations

import re
from pathlib import Path

from k3.eval.stats import rate
from k3.eval.tasks.base import Context, ItemsTask, turn_record
from k3.eval.tasks.data import read_jsonl


def _norm(s: str) -> str:
    return " ".join(s.strip().lower().split())


def score(reply: str, row: dict) -> tuple[str | None, bool]:
    """(extracted answer or None, correct)."""
    got = reply
    if row.get("extract"):
        m = re.search(row["extract"], reply, re.DOTALL)
        if not m:
            return None, False
        got = m.group(1) if m.groups() else m.group(0)
    accepted = row["answer"] if isinstance(row["answer"], list) else [row["answer"]]
    if row.get("match", "exact") == "contains":
        return got, any(_norm(a) in _norm(got) for a in accepted)
    return got, any(_norm(a) == _norm(got) for a in accepted)


class GenerationTask(ItemsTask):
    def __init__(self, path: str):
        self.name = f"gen:{Path(path).name}"
        self._items = read_jsonl(path)
        for n, row in enumerate(self._items, 1):
            if ("prompt" not in row and "messages" not in row) or "answer" not in row:
                raise ValueError(f"{path}: row {n} needs \"prompt\" (or \"messages\") and \"answer\"")
            if row.get("match", "exact") not in ("exact", "contains"):
                raise ValueError(f"{path}: row {n}: \"match\" must be \"exact\" or \"contains\"")
            if row.get("extract"):
                re.compile(row["extract"])
            row.setdefault("id", f"g{n:05d}")

    def run(self, item: dict, ctx: Context) -> dict:
        messages = item.get("messages") or [{"role": "user", "content": item["prompt"]}]
        c = ctx.ask(messages)
        got, correct = (None, None) if c.truncated else score(c.content, item)
        return {"id": item["id"], **turn_record(c), "extracted": got, "correct": correct}

    def summarise(self, records: list[dict]) -> dict:
        scored = [r for r in records if r["correct"] is not None]
        return {"truncated": len(records) - len(scored), "exact_match": rate(sum(r["correct"] for r in scored), len(scored))}
