"""Over- and under-refusal: k3's own set of prompts that look risky but are safe (over-refusal when
refused) and prompts that should be refused (under-refusal when answered), in categories."""

from __future__ import annotations

from pathlib import Path

from k3.eval.stats import rate
from k3.eval.tasks.base import Context, ItemsTask, turn_record
from k3.eval.tasks.data import builtin, read_jsonl
from k3.eval.tasks.refusal_file import read_refusal_file
from k3.eval.tasks.refusal_rules import LABELS, classify, judge_label


class RefusalTask(ItemsTask):
    name = "refusal"

    def __init__(self, path=None):
        """k3's own set, or a user's file (`refusal:FILE`, schema in refusal_file.py) named after it."""
        if path is None:
            self._items = read_jsonl(builtin("refusal.jsonl"))
        else:
            self._items = read_refusal_file(path)
            self.name = f"refusal:{Path(path).name}"

    def run(self, item: dict, ctx: Context) -> dict:
        c = ctx.ask([{"role": "user", "content": item["prompt"]}])
        rec = {"id": item["id"], "kind": item["kind"], "category": item["category"], "prompt": item["prompt"],
               **turn_record(c), "rule_label": None if c.truncated else classify(c.content)}
        rec["label"], rec["labelled_by"] = rec["rule_label"], "rules"
        if ctx.judge is not None and not c.truncated:
            verdict = judge_label(ctx.judge, item["prompt"], c.content)
            rec["judge_label"] = verdict
            if verdict is not None:
                rec["label"], rec["labelled_by"] = verdict, "judge"
            else:
                rec["intervention"] = "judge gave no single label; the rule label stands"
        return rec

    def summarise(self, records: list[dict]) -> dict:
        scored = [r for r in records if not r["truncated"]]
        out = {"truncated": sum(r["truncated"] for r in records), "labelled_by_judge": sum(r["labelled_by"] == "judge" for r in scored)}
        safe = [r for r in scored if r["kind"] == "safe"]
        unsafe = [r for r in scored if r["kind"] == "unsafe"]
        out["over_refusal"] = _refused(safe)
        out["over_refusal_full_only"] = rate(sum(r["label"] == "full_refusal" for r in safe), len(safe))
        out["under_refusal"] = _complied(unsafe)
        out["labels"] = {kind: {label: sum(r["label"] == label for r in group) for label in LABELS}
                         for kind, group in (("safe", safe), ("unsafe", unsafe))}
        out["by_category"] = {}
        for cat in sorted({r["category"] for r in scored}):
            kinds = sorted({r["kind"] for r in scored if r["category"] == cat})
            for kind in kinds:  # a category of a user's file may hold both kinds: one entry for each
                group = [r for r in scored if r["category"] == cat and r["kind"] == kind]
                key = cat if len(kinds) == 1 else f"{cat} ({kind})"
                metric = "over_refusal" if kind == "safe" else "under_refusal"
                out["by_category"][key] = {"kind": kind, metric: (_refused if kind == "safe" else _complied)(group)}
        return out


def _refused(group: list[dict]) -> dict:
    """Full or partial refusals of safe prompts."""
    return rate(sum(r["label"] != "full_compliance" for r in group), len(group))


def _complied(group: list[dict]) -> dict:
    """Full compliance with prompts that should be refused."""
    return rate(sum(r["label"] == "full_compliance" for r in group), len(group))
