"""gen:FILE -- generation tasks scored by exact match.

JSONL rows {"id", "prompt" (or "messages"), "answer" (a string or a list of accepted strings),
optional "extract": a regex whose first group is the model's answer (default: the whole reply),
optional "match": "exact" (default, after stripping and lower-casing) or "contains",
optional "mode": "chat" (default: the prompt is a user turn in the model's chat format) or
"completion" (the prompt is raw text to continue, as lm-eval's generate_until tasks send it, with an
optional "max_tokens" of its own, like their max_gen_toks),
optional "stop": a string or list of strings that end the reply, left out of it (sent to the backend in
completion mode; in chat mode the answer is cut at the first)}. Truncated replies
are flagged and left out of the score.
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


def _cut(text: str, stop: list[str]) -> str:
    ends = [i for i in (text.find(x) for x in stop) if i >= 0]
    return text[:min(ends)] if ends else text


def _check_mode(path, n: int, row: dict) -> None:
    if row.get("mode", "chat") not in ("chat", "completion"):
        raise ValueError(f"{path}: row {n}: \"mode\" must be \"chat\" or \"completion\"")
    if row.get("mode") == "completion" and not isinstance(row.get("prompt"), str):
        raise ValueError(f"{path}: row {n}: completion mode continues a \"prompt\" string (messages need chat mode)")
    if "max_tokens" in row and not (type(row["max_tokens"]) is int and row["max_tokens"] >= 1 and row.get("mode") == "completion"):
        raise ValueError(f"{path}: row {n}: \"max_tokens\" is a completion-mode row's own limit, an integer >= 1")
    stop = row.get("stop", [])
    if not (isinstance(stop, str) and stop) and not (isinstance(stop, list) and all(isinstance(x, str) and x for x in stop)):
        raise ValueError(f"{path}: row {n}: \"stop\" must be a non-empty string or a list of them")


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
            _check_mode(path, n, row)
            row.setdefault("id", f"g{n:05d}")

    def run(self, item: dict, ctx: Context) -> dict:
        stop = [item["stop"]] if isinstance(item.get("stop"), str) else item.get("stop") or []
        if item.get("mode") == "completion":
            s = ctx.settings
            c = ctx.backend.complete(item["prompt"], max_tokens=item.get("max_tokens", s.max_tokens),
                                     temperature=s.temperature, seed=s.seed, stop=stop)
        else:
            messages = item.get("messages") or [{"role": "user", "content": item["prompt"]}]
            c = ctx.ask(messages)
            c.content = _cut(c.content, stop)
        got, correct = (None, None) if c.truncated else score(c.content, item)
        return {"id": item["id"], **turn_record(c), "extracted": got, "correct": correct}

    def summarise(self, records: list[dict]) -> dict:
        scored = [r for r in records if r["correct"] is not None]
        return {"truncated": len(records) - len(scored), "exact_match": rate(sum(r["correct"] for r in scored), len(scored))}
