"""Constraint retention: a rule stated in the first user turn (uppercase, a fixed sign-off, no digits,
JSON only, a word limit), then N filler exchanges, then a final question whose answer is checked
against the rule. Filler answers are canned and obey the rule, as they would in a real conversation;
N grows over the run's `constraint_lengths`."""

from __future__ import annotations

import json
import re

from k3.eval.stats import rate
from k3.eval.tasks.base import Context, content_hash, turn_record
from k3.eval.tasks.data import builtin


def obeys(check: str, text: str) -> bool:
    text = text.strip()
    if check == "upper":
        return any(c.isalpha() for c in text) and text == text.upper()
    if check.startswith("suffix:"):
        return text.endswith(check.split(":", 1)[1])
    if check == "no_digits":
        return bool(text) and not re.search(r"[0-9]", text)
    if check == "json_answer":
        try:
            value = json.loads(text)
        except ValueError:
            return False
        return isinstance(value, dict) and set(value) == {"answer"}
    if check.startswith("max_words:"):
        return 0 < len(text.split()) < int(check.split(":", 1)[1])
    raise ValueError(f"unknown constraint check {check!r}")


def comply(check: str, answer: str) -> str:
    """A canned filler answer that obeys the rule."""
    if check == "upper":
        return answer.upper()
    if check.startswith("suffix:"):
        return f"{answer}. {check.split(':', 1)[1]}"
    if check == "json_answer":
        return json.dumps({"answer": answer})
    return answer


class ConstraintTask:
    name = "constraints"

    def __init__(self, path=None, lengths: tuple[int, ...] = (0, 4, 16, 48)):
        with open(path or builtin("constraints.json"), encoding="utf-8") as f:
            self.data = json.load(f)
        self.lengths = tuple(lengths)

    def items(self) -> list[dict]:
        return [{"id": f"{c['id']}@{n}", "constraint": c, "turns": n} for n in self.lengths for c in self.data["constraints"]]

    def fingerprint(self) -> str:
        return content_hash(self.data)  # lengths are a setting (recorded with the settings), not content

    def conversation(self, item: dict) -> list[dict]:
        c, filler = item["constraint"], self.data["filler"]
        msgs = [{"role": "user", "content": f"{c['instruction']} First question: what is 2 + 2?"},
                {"role": "assistant", "content": comply(c["check"], "Four")}]
        for i in range(item["turns"]):
            f = filler[i % len(filler)]
            msgs += [{"role": "user", "content": f["question"]}, {"role": "assistant", "content": comply(c["check"], f["answer"])}]
        return msgs + [{"role": "user", "content": self.data["final_question"]}]

    def run(self, item: dict, ctx: Context) -> dict:
        c = ctx.ask(self.conversation(item))
        rec = {"id": item["id"], "constraint": item["constraint"]["id"], "turns": item["turns"], **turn_record(c)}
        rec["kept"] = None if c.truncated else obeys(item["constraint"]["check"], c.content)
        return rec

    def summarise(self, records: list[dict]) -> dict:
        scored = [r for r in records if r["kept"] is not None]
        by_len = {str(n): rate(sum(r["kept"] for r in scored if r["turns"] == n), sum(r["turns"] == n for r in scored))
                  for n in sorted({r["turns"] for r in records})}
        return {"truncated": len(records) - len(scored), "kept": rate(sum(r["kept"] for r in scored), len(scored)),
                "kept_by_turns": by_len}
