"""The check as a person reads it: each requirement with what was measured, its interval, n and status, then
the quality, latency and memory figures, then the verdict."""

from __future__ import annotations

from k3.eval.metrics.names import LATENCIES


def show(name: str, value) -> str:
    if value is None:
        return "not measured"
    if name.split(".")[0] in LATENCIES:
        return f"{value * 1e3:,.1f} ms" if value < 1 else f"{value:,.2f} s"
    if name == "peak_rss":
        return f"{value / 1e9:,.2f} GB"
    return f"{value:,.4g}"


def _sweep(sweep: dict | None) -> list[str]:
    if not sweep:
        return []
    lines = [f"load sweep ({sweep['kind']}): level, achieved rate, TTFT p90, TPOT p50, scores, status"]
    for s in sweep["steps"]:
        ttft, tpot = (s["speed"].get("ttft_ms") or {}).get("p90"), (s["speed"].get("tpot_ms") or {}).get("p50")
        scores = ", ".join(f"{k} {v['value']:.3f} (n = {v['n']})" for k, v in s["scores"].items() if v["value"] is not None)
        rate = f"{s['achieved_rate']:.3g} req/s" if s.get("achieved_rate") else "-"
        lines.append(f"  {s['level']}: {rate}, {show('ttft', ttft and ttft / 1e3)}, {show('tpot', tpot and tpot / 1e3)}; "
                     f"{scores}; {s['status']}")
    lines.append(f"operating range: {sweep['summary']}")
    return lines


def _compare(compare: dict | None) -> list[str]:
    if not compare:
        return []
    lines = [f"compared with {compare['target']['name']} ({compare['verdict']}):"]
    for task, c in compare["scores"].items():
        if not c.get("pairs"):
            lines.append(f"  {task}: no paired items")
            continue
        lines.append(f"  {task}: {c['a_mean']:.3f} vs {c['b_mean']:.3f} over {c['pairs']} paired items, {c['test']} "
                     f"p = {c['p_value']:.3g} ({'significant' if c['significant'] else 'not significant'} at 0.05)")
    for key, d in compare["latency"].items():
        a, b = d["a"].get("p50"), d["b"].get("p50")
        if a is not None and b is not None:
            lines.append(f"  {key[:-3]} p50: {a:,.1f} ms vs {b:,.1f} ms")
    return lines


def table(result: dict) -> str:
    lines = []
    if result["requirements"]:
        width = max(len(r["requirement"]) for r in result["requirements"])
        lines += [f"{'requirement':<{width}}  {'measured':>12}  {'95 % interval':>25}  {'n':>6}  status",
                  "-" * (width + 62)]
        for r in result["requirements"]:
            lines.append(f"{r['requirement']:<{width}}  {show(r['name'], r['measured']):>12}  "
                         f"{_interval(r['name'], r['ci95']):>25}  {r['n']:>6}  {r['status']}")
            if r["status"] == "INCONCLUSIVE" and r.get("why"):
                lines.append(f"{'':<{width}}  ({r['why']})")
        lines.append("")
    m = result["measured"]
    quality = {k: v for k, v in m.items() if k.endswith(".score") and v["value"] is not None}
    lines.append("quality: " + (", ".join(f"{k} {v['value']:.3f} (n = {v['n']})" for k, v in quality.items())
                                or "no scores"))
    lines.append("latency: " + ", ".join(f"{k} {show(k, m[k]['value'])}" for k in ("ttft.p50", "ttft.p90", "ttfvt.p90",
                                                                                   "tpot.p50", "e2el.p90")
                                         if k in m and m[k]["value"] is not None))
    speed = result["speed"]
    lines.append(f"calls: {speed['completed']} completed, {speed['failed']} failed; "
                 f"{speed['total_output_tokens']:,} tokens out")
    if "peak_rss" in m:
        lines.append(f"memory: peak RSS {show('peak_rss', m['peak_rss']['value'])} (this process, the engine's)")
    lines += _sweep(result.get("sweep")) + _compare(result.get("compare"))
    lines += [f"error: {e}" for e in result.get("errors", [])]
    judge = (result.get("provenance") or {}).get("judge") or {}
    note = f" (judge not independent: {'; '.join(judge.get('why') or [])})" if judge.get("independent") is False else ""
    lines.append(f"verdict: {result['verdict']}{note} ({result['seconds']:.1f} s)")
    return "\n".join(lines)


def _interval(name: str, ci) -> str:
    low, high = ci
    if low is None and high is None:
        return "-"
    return f"[{show(name, low) if low is not None else 'unbounded'}, {show(name, high) if high is not None else 'unbounded'}]"
