"""Interventions between an agent's step and its verdict: a hint (a message the agent reads, then it works on),
or a restart (the workspace and the conversation put back as they were when the step began, and the
step asked again). Tool calls are approved, edited or rejected through Inspect's approval instead
(`--approval human`, or k3/scripted rules: interventions.py); both end up in the same records.

Scripted, so runs repeat (`-T interventions=FILE.json`):
    {"rules": [{"step": ID or "*", "if": "always" | "tests_fail", "kind": "hint" | "restart",
                "text": "what the agent is told", "times": 1}]}
"tests_fail" runs the repository's own tests in the agent's sandbox, as a person checking the work
would; `times` caps how often a rule fires for one step. Interactive (`-T interactive=true`): a person
sees each finished step (the agent's summary and the files it changed) and accepts it, hints or restarts."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

CONDITIONS = ("always", "tests_fail")
STEP_KINDS = ("hint", "restart")


@dataclass(frozen=True)
class StepRule:
    step: str
    condition: str
    kind: str
    text: str
    times: int = 1


def load(path: str | None) -> list[StepRule]:
    if not path:
        return []
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"interventions file {path}: {e}") from None
    rules = []
    for n, r in enumerate(raw.get("rules", []) if isinstance(raw, dict) else []):
        where = f"interventions file {path}: rules[{n}]"
        if not isinstance(r, dict) or r.get("kind") not in STEP_KINDS or r.get("if", "always") not in CONDITIONS:
            raise ValueError(f'{where}: needs "kind" in {STEP_KINDS} and "if" in {CONDITIONS}')
        if not isinstance(r.get("text", ""), str) or not isinstance(r.get("times", 1), int) or r.get("times", 1) < 1:
            raise ValueError(f'{where}: "text" is a string and "times" a positive number')
        rules.append(StepRule(str(r.get("step", "*")), r.get("if", "always"), r["kind"], r.get("text", ""),
                              r.get("times", 1)))
    if isinstance(raw, dict) and not rules:
        raise ValueError(f'interventions file {path}: no rules (expected {{"rules": [...]}})')
    return rules


class StepPolicy:
    """Who may step in at the end of a step: the scripted rules, then (interactive) a person."""

    def __init__(self, rules: list[StepRule], interactive: bool = False):
        self.rules, self.interactive, self.fired = rules, interactive, Counter()

    async def decide(self, step: str, tests_pass, summary: str, changed: list[str]) -> tuple[str, str, str] | None:
        """-> (kind, who, text) or None to judge the step now. `tests_pass`: an async () -> bool."""
        for n, rule in enumerate(self.rules):
            if rule.step not in ("*", step) or self.fired[(n, step)] >= rule.times:
                continue
            if rule.condition == "tests_fail" and await tests_pass():
                continue
            self.fired[(n, step)] += 1
            return rule.kind, "script", rule.text
        return self._ask(step, summary, changed) if self.interactive else None

    def _ask(self, step: str, summary: str, changed: list[str]) -> tuple[str, str, str] | None:
        from inspect_ai.util import input_screen
        from rich.prompt import Prompt

        with input_screen(header=f"k3 challenge: step {step} is done") as console:
            console.print(f"[bold]The agent says:[/bold] {summary[-2000:] or '(nothing)'}")
            console.print(f"[bold]Files changed:[/bold] {', '.join(changed) or '(none)'}")
            choice = Prompt.ask("accept (judge it), hint, or restart the step", choices=["accept", "hint", "restart"],
                                default="accept", console=console)
            if choice == "accept":
                return None
            text = Prompt.ask("what the agent is told", default="", console=console)
        return choice, "person", text
