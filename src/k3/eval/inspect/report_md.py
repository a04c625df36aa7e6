"""report.md from the report dict (report.py): provenance, then a section per task, then plots of the
rates by group (matplotlib, in the `[bench]` extra; without it the tables stand alone)."""

from __future__ import annotations

import os
from pathlib import Path


def markdown(report: dict, output: Path) -> str:
    p = report.get("provenance", {})
    server = p.get("server") or {}
    lines = ["# Evaluation report", ""]
    lines += [f"**{x}**" for x in report.get("problems", [])] + ([""] if report.get("problems") else [])
    lines += _judge(p.get("judge"))
    lines += [f"- date: {p.get('date', '?')}; k3 {p.get('k3_version', '?')} at commit {p.get('k3_commit') or 'unknown'}",
              f"- server: {server.get('server', '?')}" + (f" {server['version']}" if server.get("version") else "")
              + (f" at commit {server['commit']}" if server.get("commit") else ""),
              f"- the model's hardware: {_machine(p.get('hardware'))}"]
    if p.get("client"):
        lines.append(f"- this client's hardware (not the server's): {_machine(p['client'])}")
    lines += [f"- model fingerprint: {p.get('model_fingerprint') or 'not given by the endpoint'}", ""]
    for t in report["tasks"]:
        lines += _task(t) + _plot(t, output)
    return "\n".join(lines) + "\n"


def _machine(hw) -> str:
    if not isinstance(hw, dict):
        return str(hw or "unknown")
    return f"{hw.get('cpu', '?')}, {hw.get('cores', '?')} cores" + (f", {hw['gpu']}" if hw.get("gpu") else "")


def _judge(judge: dict | None) -> list[str]:
    if not judge:
        return []
    line = f"- judge: {judge.get('name')} at {judge.get('base_url')}"
    if judge.get("independent") is False:
        return [f"**judge not independent**: {'; '.join(judge.get('why') or [])}", "", line]
    return [line]


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.3f}" if v == v else "n/a"
    return "n/a" if v is None else str(v)


def _task(t: dict) -> list[str]:
    lines = [f"## {t['task']} ({t['model']})", "", f"log: `{t['log']}` (open with `inspect view`); status {t['status']}"]
    if t.get("error"):
        lines += ["", f"**error:** {t['error']}"]
    fingerprint = t.get("metadata", {}).get("fingerprint")
    if fingerprint:
        lines += ["", f"task fingerprint (data, prompt template, scorer): `{fingerprint}`"]
    lines += ["", "| metric | value | 95 % interval | n |", "|---|---|---|---|"]
    lines += [f"| `{name}` | {_fmt(m['value'])} | {_interval(m['ci95'])} | {m['n']} |" for name, m in t["metrics"].items()]
    mv = t["main"]
    lines += ["", f"{mv['n']} scored, {mv['truncated']} truncated: main score {_fmt(mv['excluding_truncated'])} "
                  f"with truncated answers left out, {_fmt(mv['truncated_as_failed'])} counting them as failed."]
    if t["groups"]:
        lines += ["", "| group | rate | 95 % interval | n |", "|---|---|---|---|"]
        lines += [f"| {g} | {r['rate']:.3f} | {r['ci95'][0]:.3f}-{r['ci95'][1]:.3f} | {r['n']} |"
                  for g, r in sorted(t["groups"].items(), key=lambda kv: _order(kv[0]))]
    iv = t["interventions"]
    kinds = ", ".join(f"{k} {n}" for k, n in sorted(iv["by_decision"].items())) or "none"
    u = t["usage"]
    lines += ["", f"interventions: {iv['total']} ({kinds}); limits hit: {t['limits_hit'] or 'none'}",
              f"tokens: {u['input_tokens']} in, {u['output_tokens']} out; cost: "
              + (f"${u['cost_usd']:.4f}" if u["cost_usd"] is not None else "no price given (--prices)")
              + f"; time: {u['total_time_s']:.1f} s in all, {u['working_time_s']:.1f} s working", ""]
    return lines + (_challenge(t["challenge"]) if t.get("challenge") else [])


def _challenge(c: dict) -> list[str]:
    """The challenge's records: a row per task (or chain) and epoch."""
    lines = [f"{c['challenge']}: {c['completed']:g} of {c['tasks']} tasks completed ({c['steps_run']:g} run); "
             f"interventions {c['interventions']:g} ({', '.join(f'{k} {v}' for k, v in c['by_kind'].items()) or 'none'}); hallucinations {c['hallucinations']:g}", "",
             "| task | epoch | steps passed | turns | interventions | hallucinations | context (tokens) | sandbox start (s) "
             "| agent (s) | judge (s) |", "|---|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['task']} | {r['epoch']} | {r['completed']} / {r['steps']} | {r['turns']} | {r['interventions']} | "
              f"{r['hallucinations']} | {r['context_tokens']} | {_fmt(r['sandbox_start_s'])} | {_fmt(r['agent_s'])} | "
              f"{_fmt(r['judge_s'])} |" for r in c["rows"]]
    return lines + [""]


def _interval(ci) -> str:
    low, high = ci
    if low is None and high is None:
        return "n/a"
    return f"{_fmt(low) if low is not None else 'unbounded'} - {_fmt(high) if high is not None else 'unbounded'}"


def _order(group: str):
    """Numeric groups (lengths) in numeric order, before named ones."""
    return (0, float(group), "") if group.replace(".", "", 1).isdigit() else (1, 0.0, group)


def _plot(t: dict, output: Path) -> list[str]:
    if len(t["groups"]) < 2:
        return []
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return ["_Plots need the `[bench]` extra (matplotlib)._", ""]
    rows = sorted(t["groups"].items(), key=lambda kv: _order(kv[0]))
    fig, ax = plt.subplots(figsize=(7, 0.3 * len(rows) + 1.2))
    rates = [100 * r["rate"] for _, r in rows]
    err = [[100 * max(0.0, r["rate"] - r["ci95"][0]) for _, r in rows], [100 * max(0.0, r["ci95"][1] - r["rate"]) for _, r in rows]]
    ax.barh(range(len(rows)), rates, xerr=err, capsize=3)
    ax.set_yticks(range(len(rows)), [g for g, _ in rows])
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.set_xlabel("main score, % (95 % Wilson interval)")
    ax.set_title(t["task"])
    name = "plot-" + "".join(c if c.isalnum() else "-" for c in t["task"]) + ".png"
    tmp = output / (name + ".tmp.png")
    fig.savefig(tmp, dpi=110, bbox_inches="tight")
    plt.close(fig)
    os.replace(tmp, output / name)
    return [f"![{t['task']} by group]({name})", ""]
