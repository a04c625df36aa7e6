"""Interventions through Inspect AI's approval mechanism: who stepped in on which tool call, and how.

`k3/scripted` is an approver for frozen, repeatable interventions (a person uses Inspect's `human`
approver the same way): rules matched in order against a tool call's name and arguments, each with a
decision (approve, reject, modify, terminate) and the explanation the model sees. A modify rule says how
the call changes (`set` arguments to values, or `sub` a pattern in an argument), and the changed call is
the one that runs; a modify that changes nothing is an approval. `interventions(log)` reads every
approval event of an Inspect log back as records {sample, epoch, tool, decision, approver, explanation,
arguments, and for a modify the arguments that ran}, approvals left out, so a report counts them by
kind beside tokens and time."""

from __future__ import annotations

import dataclasses
import json
import re

from inspect_ai.approval import Approval, approver

DECISIONS = ("approve", "reject", "modify", "terminate")


@approver(name="scripted")
def scripted(rules: list[dict] | None = None):
    """`rules`: [{"tool": a name or "*", "match": REGEX over the arguments' JSON, "decision": ..., "explanation":
    TEXT, and for modify "set": {ARGUMENT: VALUE} and/or "sub": {ARGUMENT: [REGEX, REPLACEMENT]}}]."""
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
    sets, subs = rule.get("set") or {}, rule.get("sub") or {}
    if decision == "modify" and not (sets or subs):
        raise ValueError("scripted approver: a modify rule says how the call changes: \"set\": {argument: value} or "
                         "\"sub\": {argument: [pattern, replacement]} (a hint alone would change nothing that runs)")
    if not isinstance(sets, dict) or not isinstance(subs, dict) or not all(
            isinstance(v, (list, tuple)) and len(v) == 2 for v in subs.values()):
        raise ValueError("scripted approver: set is {argument: value}, sub is {argument: [pattern, replacement]}")
    return {"tool": rule.get("tool", "*"), "match": re.compile(rule.get("match", "")), "decision": decision,
            "explanation": rule.get("explanation", f"{decision} by the scripted approver"), "set": sets,
            "sub": {k: (re.compile(p), r) for k, (p, r) in subs.items()}}


def _decide(rule: dict, call) -> Approval:
    if rule["decision"] != "modify":
        return Approval(decision=rule["decision"], explanation=rule["explanation"])
    args = {**call.arguments, **rule["set"]}
    for key, (pattern, replacement) in rule["sub"].items():
        if isinstance(args.get(key), str):
            args[key] = pattern.sub(replacement, args[key])
    if args == call.arguments:
        return Approval(decision="approve", explanation=f"{rule['explanation']} (the modify rule changed nothing)")
    return Approval(decision="modify", modified=dataclasses.replace(call, arguments=args),
                    explanation=rule["explanation"])


def interventions(log) -> list[dict]:
    """Every approval decision other than a plain approve, from an EvalLog (read with its samples)."""
    out = []
    for sample in log.samples or []:
        for event in sample.events:
            if getattr(event, "event", None) == "approval" and event.decision != "approve":
                modified = event.modified.arguments if event.decision == "modify" and event.modified else None
                out.append({"sample": sample.id, "epoch": sample.epoch, "tool": event.call.function,
                            "decision": event.decision, "approver": event.approver,
                            "explanation": event.explanation, "arguments": event.call.arguments,
                            "modified": modified})
    return out
