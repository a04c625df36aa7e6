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
            "gen": {"exact_match": ("exact_match", "rate")},
            "humaneval": {"pass@1": ("pass_at_k", "pass@1", "mean"), "solved": ("solved", "rate")}}[kind]
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
    for name, task in report["tasks"].items():
        if name.split(":")[0] == "humaneval":
            lines += humaneval_section(name, task)
    agent = report["tasks"].get("agent")
    if agent:
        s = agent["scores"]
        lines += ["", "## Agent", "", f"- success: {_pct(s['success'])}",
                  f"- interventions: {s['interventions']['total']} {json.dumps(s['interventions']['by_kind'])}",
                  f"- sandbox isolation: {', '.join(s['isolation'])}"]
    return "\n".join(lines) + "\n"


def humaneval_section(name: str, task: dict) -> list[str]:
    """pass@k, the per-sample stages and hallucination counts, then one row per problem."""
    s = task["scores"]
    lines = ["", f"## HumanEval ({name})", "", f"{s['problems']} problems, {s['samples']} samples "
             f"({s['truncated']} truncated, counted as failed); solved by at least one sample: {_pct(s['solved'])}", ""]
    for k, m in s["pass_at_k"].items():
        lines.append(f"- {k}: {100 * m['mean']:.1f} % ± {100 * m['stderr']:.1f} (standard error over problems)")
    stages = {"has_code": "holding code", "parses": "that parse", "runs": "that run", "passes": "that pass"}
    lines += [f"- samples {stages[stage]}: {_pct(r)}" for stage, r in s["per_sample"].items()]
    lines += [f"- samples with {h.replace('_', ' ')}: {_pct(r)}" for h, r in s["hallucinations"].items()]
    lines += ["", "| problem | passed / samples | first failure |", "|---|---|---|"]
    for r in task["records"]:
        failure = next((x["error"] for x in r["samples"] if not x["passes"]), "")
        lines.append(f"| {r['id']} | {r['passed']}/{r['n']} | {_cell(failure)} |")
    return lines


def _cell(text: str, width: int = 80) -> str:
    """One table cell: a single line, pipes escaped, cut to `width`."""
    one = " ".join(str(text).split()).replace("|", "\\|")
    return one if len(one) <= width else one[:width - 1] + "…"


def _fmt(v) -> str:
    return "n/a" if v is None else f"{v:.4g}" if isinstance(v, float) else str(v)


def write_reports(report: dict, output: Path) -> None:
    write_atomic(output / "report.json", json.dumps(report, indent=1, ensure_ascii=False))
    write_atomic(output / "report.md", markdown(report) + "".join(line + "\n" for line in figures(report, output)))
