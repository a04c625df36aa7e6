"""Multi-step agent tasks in the sandbox: the model works with tools in a fresh workspace until it
answers without a tool call or hits the step limit; then a hidden check, which the model never sees,
runs against the workspace and decides success."""

from __future__ import annotations

import json

from k3.eval.sandbox import Limits, Sandbox
from k3.eval.stats import mean_stderr, rate
from k3.eval.tasks.agent_tools import TOOLS, execute
from k3.eval.tasks.base import Context, ItemsTask, content_hash
from k3.eval.tasks.data import builtin

SYSTEM = ("You are a careful software engineer working in a sandboxed workspace. Use the tools to inspect and "
          "change files and to run code. When the task is done, reply with a short summary and no tool call.")


class AgentTask(ItemsTask):
    name = "agent"

    def __init__(self, path=None, limits: Limits = Limits(), isolation: str = "namespaces"):
        with open(path or builtin("agent_tasks.json"), encoding="utf-8") as f:
            self._items = json.load(f)
        self.limits, self.isolation = limits, isolation

    def fingerprint(self) -> str:
        return content_hash({"tasks": self._items, "system": SYSTEM, "tools": TOOLS})

    @staticmethod
    def prompt_hash(item: dict) -> str:
        """What the agent is given (system prompt, task prompt, starting files, tools), frozen."""
        return content_hash({"system": SYSTEM, "prompt": item["prompt"], "files": item["files"], "tools": TOOLS})

    def run(self, item: dict, ctx: Context) -> dict:
        with Sandbox(self.limits, files=item["files"], isolation=self.isolation) as sb:
            messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": item["prompt"]}]
            log: list[dict] = []
            tokens = [0, 0]
            steps, finished = 0, False
            for steps in range(1, ctx.settings.agent_steps + 1):
                c = ctx.ask(messages, tools=TOOLS)
                tokens[0] += c.prompt_tokens
                tokens[1] += c.completion_tokens
                messages.append(c.as_message())
                if c.truncated:
                    log.append({"step": steps, "kind": "truncated", "detail": "the turn hit the token limit"})
                if not c.tool_calls:
                    finished = True
                    break
                for call in c.tool_calls:
                    messages.append({"role": "tool", "tool_call_id": call["id"], "content": execute(sb, call, log, steps)})
            if not finished:
                log.append({"step": steps, "kind": "step_limit", "detail": f"no final answer after {steps} steps"})
            verdict = sb.judge(item["hidden_check"])   # in a process the agent's code cannot reach (judge.py)
        passed = verdict.verdict is not None and verdict.verdict.get("passes") is True
        return {"id": item["id"], "prompt_hash": self.prompt_hash(item), "success": passed, "steps": steps,
                "finished": finished, "interventions": log, "prompt_tokens": tokens[0], "completion_tokens": tokens[1],
                "check_output": _check_output(verdict), "isolation": verdict.layers, "transcript": messages}

    def summarise(self, records: list[dict]) -> dict:
        kinds: dict[str, int] = {}
        for r in records:
            for i in r["interventions"]:
                kinds[i["kind"]] = kinds.get(i["kind"], 0) + 1
        return {"success": rate(sum(r["success"] for r in records), len(records)),
                "steps": mean_stderr([r["steps"] for r in records]),
                "interventions": {"total": sum(kinds.values()), "by_kind": kinds,
                                  "tasks_with_any": sum(bool(r["interventions"]) for r in records)},
                "isolation": sorted({layer for r in records for layer in r["isolation"]}),
                "prompt_hashes": {r["id"]: r["prompt_hash"] for r in records}}


def _check_output(r) -> str:
    """What the record keeps of the hidden check: its verdict's error (never the check itself) and the run's output."""
    said = "no verdict (the run ended first)" if r.verdict is None else (r.verdict.get("error") or "passed")
    return f"verdict: {said}\n{r.summary(1000)}"
