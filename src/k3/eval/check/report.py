"""The check as a person reads it: each requirement with what was measured and PASS/FAIL, then the
quality, latency and memory figures, then the verdict."""

from __future__ import annotations

SECONDS = ("ttft", "ttfvt", "tpot", "e2el", "itl")


def show(name: str, value) -> str:
    if value is None:
        return "not measured"
    if name.split(".")[0] in SECONDS:
        return f"{value * 1e3:,.1f} ms" if value < 1 else f"{value:,.2f} s"
    if name == "peak_rss":
        return f"{value / 1e9:,.2f} GB"
    return f"{value:,.4g}"


def table(result: dict) -> str:
    lines = []
    if result["requirements"]:
        width = max(len(r["requirement"]) for r in result["requirements"])
        lines += [f"{'requirement':<{width}}  {'measured':>14}  status", "-" * (width + 24)]
        for r in result["requirements"]:
            lines.append(f"{r['requirement']:<{width}}  {show(r['name'], r['measured']):>14}  {r['status']}")
        lines.append("")
    m = result["measured"]
    quality = {k: v for k, v in m.items() if k.endswith(".score")}
    lines.append("quality: " + (", ".join(f"{k} {v:.3f}" for k, v in quality.items()) or "no scores"))
    lines.append("latency: " + ", ".join(f"{k} {show(k, m[k])}" for k in ("ttft.p50", "ttft.p90", "ttfvt.p90", "tpot.p50",
                                                                          "e2el.p90") if k in m))
    speed = result["speed"]
    lines.append(f"calls: {speed['completed']} completed, {speed['failed']} failed; "
                 f"{speed['total_output_tokens']:,} tokens out")
    if "peak_rss" in m:
        lines.append(f"memory: peak RSS {show('peak_rss', m['peak_rss'])} (this process, the engine's)")
    lines.append(f"verdict: {result['verdict']} ({result['seconds']:.1f} s)")
    return "\n".join(lines)
