"""The run's reports: report.json (settings, task hashes, every record and score), report.md (a summary
for people) and the one-line headline used as the command's last stdout line."""

from __future__ import annotations

import json
import os
from pathlib import Path

from k3.eval.plots import figures


def headline(name: str, scores: dict) -> dict:
    """The few numbers that summarise a task."""
    kind = name.split(":")[0]
    pick = {"refusal": {"over_refusal": ("over_refusal", "rate"), "under_refusal": ("under_refusal", "rate")},
            "agent": {"success": ("success", "rate")},
            "code": {"runs": ("runs", "rate"), "passes": ("passes", "rate")},
            "constraints": {"kept": ("kept", "rate")},
            "perplexity": {"bits_per_byte": ("bits_per_byte",), "perplexity": ("perplexity",)},
            "mc": {"acc": ("acc", "mean"), "acc_norm": ("acc_norm", "mean")},
            "gen": {"exact_match": ("exact_match", "rate")}}[kind]
    out = {}
    for label, path in pick.items():
        v = scores
        for p in path:
            v = v.get(p) if isinstance(v, dict) else None
        out[label] = v
    return out


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _pct(r: dict | None) -> str:
    if not r or r.get("rate") is None:
        return "n/a"
    lo, hi = r["ci95"]
    return f"{100 * r['rate']:.1f} % ({r['k']}/{r['n']}; 95 % CI {100 * lo:.1f}–{100 * hi:.1f})"


def markdown(report: dict) -> str:
    m = report["model"]
    lines = [f"# k3 eval: {m.get('model')} ({m.get('kind')})", "",
             f"harness {report['harness_version']} · settings `{json.dumps(report['settings'])}`"
             + (f" · judge {report['judge'].get('model')}" if report.get("judge") else "") + "", ""]
    lines += ["| task | items | headline | truncated | tokens in/out | cost (USD) | task hash (frozen) |",
              "|---|---|---|---|---|---|---|"]
    for name, t in report["tasks"].items():
        head = ", ".join(f"{k} {_fmt(v)}" for k, v in headline(name, t["scores"]).items())
        u = t["usage"]
        spent = "n/a" if u["cost_usd"] is None else f"{u['cost_usd']:.4f}"
        frozen = {True: "yes", False: "NO: edited", None: "file"}[t["frozen"]]
        lines.append(f"| {name} | {t['items']} | {head} | {t['scores'].get('truncated', 0)} | "
                     f"{u['prompt_tokens']}/{u['completion_tokens']} | {spent} | `{t['task_hash'][:12]}` ({frozen}) |")
    for name, refusal in report["tasks"].items():
        if name.split(":")[0] != "refusal":
            continue
        s = refusal["scores"]
        title = f"## Refusal ({name})" if ":" in name else "## Refusal"
        lines += ["", title, "", f"- over-refusal (safe prompts refused fully or partly): {_pct(s['over_refusal'])}",
                  f"- under-refusal (harmful prompts fully answered): {_pct(s['under_refusal'])}",
                  f"- truncated answers left out: {s['truncated']}", "", "| category | kind | rate |", "|---|---|---|"]
        for cat, c in s["by_category"].items():
            metric = "over_refusal" if c["kind"] == "safe" else "under_refusal"
            lines.append(f"| {cat} | {c['kind']} | {_pct(c[metric])} |")
    agent = report["tasks"].get("agent")
    if agent:
        s = agent["scores"]
        lines += ["", "## Agent", "", f"- success: {_pct(s['success'])}",
                  f"- interventions: {s['interventions']['total']} {json.dumps(s['interventions']['by_kind'])}",
                  f"- sandbox isolation: {', '.join(s['isolation'])}"]
    return "\n".join(lines) + "\n"


def _fmt(v) -> str:
    return "n/a" if v is None else f"{v:.4g}" if isinstance(v, float) else str(v)


def write_reports(report: dict, output: Path) -> None:
    write_atomic(output / "report.json", json.dumps(report, indent=1, ensure_ascii=False))
    write_atomic(output / "report.md", markdown(report) + "".join(line + "\n" for line in figures(report, output)))
