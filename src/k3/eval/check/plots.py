"""The check on one page (matplotlib, the [bench] extra): latency against load and score against load
from a sweep, and the process's memory over the run for a model served here."""

from __future__ import annotations

from pathlib import Path


def plot(path: str | Path, result: dict) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (lat, score, mem) = plt.subplots(1, 3, figsize=(15, 4.2))
    steps = (result.get("sweep") or {}).get("steps") or []
    kind = "achieved request rate (req/s)"
    levels = [s.get("achieved_rate") or 0.0 for s in steps]
    for key, label in (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"), ("e2el_ms", "end-to-end")):
        for stat, style in (("p50", "-o"), ("p90", "--o")):
            values = [(s["speed"].get(key) or {}).get(stat) for s in steps]
            if any(v is not None for v in values):
                lat.plot(levels, values, style, label=f"{label} {stat}")
    _frame(lat, f"latency against {kind}", kind, "ms", steps)
    names = sorted({k for s in steps for k in s["scores"]})
    for name in names:
        score.plot(levels, [(s["scores"].get(name) or {}).get("value") for s in steps], "-o", label=name)
    _frame(score, f"score against {kind} (the answers served at each load)", kind, "score", steps and names)
    samples = (result.get("memory") or {}).get("rss_over_time") or []
    if samples:
        mem.plot([t for t, _ in samples], [b / 1e9 for _, b in samples])
    _frame(mem, "resident memory (this process)", "seconds", "GB", samples, legend=False)
    fig.suptitle(f"k3 check: {result.get('verdict', '')}")
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def _frame(ax, title: str, xlabel: str, ylabel: str, data, legend: bool = True) -> None:
    ax.set_title(title, fontsize=10)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if not data:
        ax.text(0.5, 0.5, "not measured in this run", ha="center", va="center", transform=ax.transAxes, color="gray")
    elif legend:
        ax.legend(fontsize=8)
