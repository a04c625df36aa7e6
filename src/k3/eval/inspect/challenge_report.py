"""A challenge run read back from its Inspect log: one leaderboard row (model, challenge version, tasks
completed, interventions, hallucinations, turns, tokens, cost, time) and a row per task (with its
sandbox-start and judge time), from the records every sample's score carries (challenge.py). Rows of
different challenge versions, or of one version judged by different scorers (their fingerprints
differ), are kept in separate tables: they are never compared."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from inspect_ai.log import EvalLog, read_eval_log

from k3.eval.prices import usage
from k3.eval.stats import rate

TASK = "k3/challenge"


def is_challenge(log: EvalLog) -> bool:
    return log.eval.task in (TASK, "challenge") and "prompt_sha256" in (log.eval.metadata or {})


def _scores(log: EvalLog) -> list[tuple]:
    out = []
    for s in log.samples or []:
        sc = (s.scores or {}).get("steps_judged")
        if sc is not None and isinstance(sc.value, dict):
            out.append((s, sc))
    return out


def tasks(log: EvalLog) -> list[dict]:
    """A row per sample (a task, or a chain) and epoch."""
    rows = []
    for s, sc in _scores(log):
        meta, t = sc.metadata or {}, (sc.metadata or {}).get("totals", {})
        rows.append({"task": str(s.id), "epoch": s.epoch, "kind": meta.get("kind"), "completed": meta.get("completed", 0),
                     "steps": meta.get("steps", 1), "passed": sc.value.get("passed"), "turns": t.get("turns"),
                     "interventions": t.get("interventions"), "hallucinations": t.get("hallucinations"),
                     "context_tokens": t.get("context_tokens"), "sandbox_start_s": t.get("sandbox_start_s"),
                     "agent_s": t.get("agent_s"), "judge_s": t.get("judge_s")})
    return rows


def row(log: EvalLog, prices: dict | None = None) -> dict:
    """The run's leaderboard row."""
    meta, scored = log.eval.metadata or {}, _scores(log)
    epochs = max((s.epoch for s, _ in scored), default=1)
    steps = sum((sc.metadata or {}).get("steps", 1) for _, sc in scored)
    completed = sum((sc.metadata or {}).get("completed", 0) for _, sc in scored)
    kinds, who = Counter(), Counter()
    hallucinations = turns = 0
    for _, sc in scored:
        records = (sc.metadata or {}).get("records", {})
        kinds.update(i["kind"] for i in records.get("interventions", []))
        who.update(i["who"] for i in records.get("interventions", []))
        hallucinations += len(records.get("hallucinations", []))
        turns += (sc.metadata or {}).get("totals", {}).get("turns", 0)
    spent = usage([s for s, _ in scored], prices or {})
    return {"model": log.eval.model, "challenge": meta.get("challenge"), "fingerprint": meta.get("fingerprint"),
            "log": log.location, "epochs": epochs, "tasks": meta.get("tasks"),
            "completed": completed / epochs, "steps_run": steps / epochs, "pass_rate": rate(completed, steps),
            "interventions": sum(kinds.values()) / epochs, "by_kind": dict(kinds), "by_who": dict(who),
            "hallucinations": hallucinations / epochs, "turns": turns / epochs,
            "input_tokens": spent["input_tokens"], "output_tokens": spent["output_tokens"],
            "cost_usd": None if spent["cost_usd"] is None else round(spent["cost_usd"], 4),
            "time_s": round(sum(s.total_time or 0 for s, _ in scored) / epochs, 1), "rows": tasks(log)}


def leaderboard(paths: list[str | Path], prices: dict | None = None) -> dict[str, list[dict]]:
    """Every challenge log under `paths` (log files or directories) -> {"LABEL fingerprint[:12]": rows}, best first."""
    found = []
    for p in map(Path, paths):
        files = sorted(p.rglob("*.eval")) + sorted(p.rglob("*.json")) if p.is_dir() else [p]
        for f in files:
            try:
                log = read_eval_log(str(f))
            except Exception:
                if p.is_dir():
                    continue          # a directory may hold report.json and other files beside the logs
                raise ValueError(f"{f}: not an Inspect log") from None
            if is_challenge(log):
                found.append(row(log, prices))
    if not found:
        raise ValueError(f"no challenge log in {', '.join(map(str, paths))} (run `k3 eval challenge ...` first)")
    boards: dict[str, list[dict]] = {}
    for r in found:
        boards.setdefault(f"{r['challenge']} {str(r['fingerprint'])[:12]}", []).append(r)
    for rows in boards.values():
        rows.sort(key=lambda r: (-r["completed"], r["interventions"], r["cost_usd"] or 0, r["time_s"]))
    return boards


def markdown(boards: dict[str, list[dict]]) -> str:
    out = []
    for key, rows in boards.items():
        label, _, fp = key.partition(" ")
        out += [f"### {label} (judging {fp})", "",
                "| model | tasks completed | pass rate (95 % CI) | interventions | hallucinations | turns | tokens in / out "
                "| cost | time (tasks summed) |", "|---|---|---|---|---|---|---|---|---|"]
        out += [_line(r) for r in rows] + [""]
    return "\n".join(out)


def _line(r: dict) -> str:
    low, high = r["pass_rate"]["ci95"]
    kinds = ", ".join(f"{k} {v}" for k, v in sorted(r["by_kind"].items()))
    spent = "n/a" if r["cost_usd"] is None else f"${r['cost_usd']:.2f}"
    return (f"| {r['model']} | {r['completed']:g} / {r['tasks']} ({r['steps_run']:g} run) | {r['pass_rate']['rate']:.0%} ({low:.0%}-{high:.0%}) "
            f"| {r['interventions']:g}{f' ({kinds})' if kinds else ''} | {r['hallucinations']:g} | {r['turns']:g} "
            f"| {r['input_tokens']:,} / {r['output_tokens']:,} | {spent} | {r['time_s']:g} s |")
