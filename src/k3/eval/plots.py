"""Pictures for report.md, where people would rather look than read: refusal rates by category with their
95 % intervals, constraint retention against conversation length, and HumanEval's pass@k. matplotlib is in the `[bench]`
extra; without it the report says so and carries the tables alone.

Each figure is written to a temporary name and renamed, like the reports; `figures(report, output)`
returns the markdown lines that show them.
"""

from __future__ import annotations

import os
from pathlib import Path


def figures(report: dict, output: Path) -> list[str]:
    """Write the report's figures into `output` -> markdown lines (a one-line note when matplotlib is absent)."""
    wanted = [(name, t) for name, t in report["tasks"].items() if name.split(":")[0] in DRAWN]
    if not wanted:
        return []
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return ["", "_Plots need the `[bench]` extra (matplotlib): pip install 'k3[bench]'._"]
    lines = ["", "## Plots", ""]
    for name, task in wanted:
        fig = DRAWN[name.split(":")[0]](plt, name, task["scores"])
        if fig is None:
            continue
        file = "plot-" + "".join(c if c.isalnum() else "-" for c in name) + ".png"
        tmp = output / (file + ".tmp.png")
        fig.savefig(tmp, dpi=110, bbox_inches="tight")
        plt.close(fig)
        os.replace(tmp, output / file)
        lines += [f"![{name}]({file})", ""]
    return lines


def _interval(r: dict) -> tuple[float, float, float]:
    """(rate, below, above) in percent for an error bar."""
    lo, hi = r["ci95"]  # the bounds can sit a rounding error inside the rate at 0 or 1
    return 100 * r["rate"], 100 * max(0.0, r["rate"] - lo), 100 * max(0.0, hi - r["rate"])


def _refusal(plt, name: str, scores: dict):
    rows = []
    for cat, c in scores["by_category"].items():
        metric = "over_refusal" if c["kind"] == "safe" else "under_refusal"
        if c[metric]["rate"] is not None:
            rows.append((cat, c["kind"], *_interval(c[metric])))
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(7, 0.32 * len(rows) + 1.2))
    ys = range(len(rows))
    colours = ["tab:blue" if kind == "safe" else "tab:red" for _, kind, *_ in rows]
    ax.barh(ys, [r[2] for r in rows], xerr=[[r[3] for r in rows], [r[4] for r in rows]], color=colours, capsize=3)
    ax.set_yticks(list(ys), [f"{cat} ({kind})" for cat, kind, *_ in rows])
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.set_xlabel("% (blue: safe prompts refused; red: harmful prompts answered), 95 % interval")
    ax.set_title(name)
    return fig


def _constraints(plt, name: str, scores: dict):
    points = [(int(n), *_interval(r)) for n, r in scores["kept_by_turns"].items() if r["rate"] is not None]
    if not points:
        return None
    fig, ax = plt.subplots(figsize=(6, 3.2))
    ax.errorbar([p[0] for p in points], [p[1] for p in points], yerr=[[p[2] for p in points], [p[3] for p in points]],
                marker="o", capsize=3)
    ax.set_ylim(0, 100)
    ax.set_xlabel("filler exchanges after the rule")
    ax.set_ylabel("% of answers keeping the rule")
    ax.set_title(name)
    return fig


def _pass_at_k(plt, name: str, scores: dict):
    ks = list(scores["pass_at_k"].items())
    if not ks:
        return None
    fig, ax = plt.subplots(figsize=(1.2 * len(ks) + 2.5, 3.2))
    ax.bar([k for k, _ in ks], [100 * m["mean"] for _, m in ks], yerr=[196 * m["stderr"] for _, m in ks],
           color="tab:green", capsize=4)
    ax.set_ylim(0, 100)
    ax.set_ylabel("% of problems (±1.96 standard errors)")
    ax.set_title(f"{name}: {scores['problems']} problems, {scores['samples']} samples")
    return fig


DRAWN = {"refusal": _refusal, "constraints": _constraints, "humaneval": _pass_at_k}
