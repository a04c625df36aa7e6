"""Interventions through Inspect AI's approval mechanism: who stepped in on which tool call, and how.

`k3/scripted` is an approver for frozen, repeatable interventions (a person uses Inspect's `human`
approver the same way): rules matched in order against a tool call's name and arguments, each with a
decision (approve, reject, modify with a hint appended to the call's command, terminate) and the
explanation the model sees. `interventions(log)` reads every approval event of an Inspect log back as
records {sample, epoch, tool, decision, approver, explanation}, approvals that changed nothing left
out, so a report counts them by kind beside tokens and time."""

from __future__ import annotations

import dataclasses
import json
import re

from inspect_ai.approval import Approval, approver

DECISIONS = ("approve", "reject", "modify", "terminate")


@approver(name="scripted")
def scripted(rules: list[dict] | None = None):
    """`rules`: [{"tool": GLOB-free name or "*", "match": REGEX over the arguments' JSON, "decision": ...,
    "explanation": TEXT, "hint": TEXT (modify: appended to the `command`/`code` argument as a comment)}]."""
    checked = [_rule(r) for r in rules or []]

    async def approve(message, call, view, history) -> Approval:
        args = json.dumps(call.arguments, sort_keys=True)
        for rule in checked:
            if rule["tool"] in ("*", call.function) and rule["match"].search(args):
                return _decide(rule, call)
        return Approval(decision="approve", explanation="no rule matched")

    return approve


def _rule(rule: dict) -> dict:
    decision = rule.get("decision", "reject")
    if decision not in DECISIONS:
        raise ValueError(f"scripted approver: decision must be one of {', '.join(DECISIONS)}, got {decision!r}")
    return {"tool": rule.get("tool", "*"), "match": re.compile(rule.get("match", "")), "decision": decision,
            "explanation": rule.get("explanation", f"{decision} by the scripted approver"), "hint": rule.get("hint")}


def _decide(rule: dict, call) -> Approval:
    if rule["decision"] != "modify":
        return Approval(decision=rule["decision"], explanation=rule["explanation"])
    args = dict(call.arguments)
    key = next((k for k in ("command", "cmd", "code") if isinstance(args.get(k), str)), None)
    if key is not None and rule["hint"]:
        args[key] = f"{args[key]}\n# hint: {rule['hint']}"
    return Approval(decision="modify", modified=dataclasses.replace(call, arguments=args),
                    explanation=rule["explanation"])


def interventions(log) -> list[dict]:
    """Every approval decision other than a plain approve, from an EvalLog (read with its samples)."""
    out = []
    for sample in log.samples or []:
        for event in sample.events:
            if getattr(event, "event", None) == "approval" and event.decision != "approve":
                out.append({"sample": sample.id, "epoch": sample.epoch, "tool": event.call.function,
                            "decision": event.decision, "approver": event.approver,
                            "explanation": event.explanation})
    return out
