"""Does the code a model writes run? For each prompt: take the first fenced code block of the answer,
then, in the sandbox, check that it parses, that its imports and the module attributes it uses exist,
that every function it calls by name is defined, imported or built in, that it runs, and that a
hidden test passes."""

from __future__ import annotations

import json
import re
import secrets
from pathlib import Path

from k3.eval.sandbox import Limits, Sandbox
from k3.eval.stats import rate
from k3.eval.tasks.base import Context, ItemsTask, turn_record
from k3.eval.tasks.code_checker import empty_result
from k3.eval.tasks.data import builtin, read_jsonl

FENCE = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.DOTALL)
CHECKER = Path(__file__).with_name("code_checker.py")
STAGES = ("has_code", "parses", "imports_exist", "attributes_exist", "calls_defined", "runs", "passes")


def extract_code(answer: str) -> str | None:
    m = FENCE.search(answer)
    return m.group(1) if m else None


def check_in_sandbox(code: str, test: str, limits: Limits, isolation: str) -> dict:
    """Run code_checker.py on `code` then `test` in a fresh sandbox -> its findings (see code_checker.check)."""
    nonce = secrets.token_hex(16)
    with Sandbox(limits, isolation=isolation) as sb:
        (sb.control / "answer.py").write_text(code)
        (sb.control / "test.py").write_text(test)
        r = sb.run_python(script=CHECKER, args=(str(sb.control / "answer.py"), str(sb.control / "test.py")),
                          stdin=nonce.encode() + b"\n")
    verdicts = [line[len(nonce) + 1:] for line in r.stdout.splitlines() if line.startswith(nonce + " ")]
    try:
        return json.loads(verdicts[-1])
    except (IndexError, ValueError):
        return empty_result("the checker gave no verdict (killed, or the code ended the process): " + r.summary(300))


class CodeTask(ItemsTask):
    name = "code"

    def __init__(self, path=None, limits: Limits = Limits(), isolation: str = "namespaces"):
        self._items = read_jsonl(path or builtin("code_tasks.jsonl"))
        self.limits, self.isolation = limits, isolation

    def run(self, item: dict, ctx: Context) -> dict:
        c = ctx.ask([{"role": "user", "content": item["prompt"]}])
        rec = {"id": item["id"], "prompt": item["prompt"], **turn_record(c)}
        code = None if c.truncated else extract_code(c.content)
        rec["has_code"] = code is not None
        if code is None:
            return rec | {s: False for s in STAGES[1:]}
        found = check_in_sandbox(code, item["test"], self.limits, self.isolation)
        rec |= found
        rec["imports_exist"] = found["parses"] and not found["missing_imports"]
        rec["attributes_exist"] = rec["imports_exist"] and not found["missing_attributes"]
        rec["calls_defined"] = found["parses"] and not found["undefined_calls"]
        return rec

    def summarise(self, records: list[dict]) -> dict:
        scored = [r for r in records if not r["truncated"]]
        return {"truncated": len(records) - len(scored)} | {s: rate(sum(bool(r[s]) for r in scored), len(scored)) for s in STAGES}
