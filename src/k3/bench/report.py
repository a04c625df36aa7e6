"""Benchmark output: a readable table, the JSON document (last line of stdout), per-request records
(--save) and plots (--plot: latency distributions, and TPOT against context for a context sweep)."""

from __future__ import annotations

import json
from pathlib import Path

from k3.bench.records import RequestRecord

LATENCIES = (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"), ("itl_ms", "ITL"), ("e2el_ms", "E2E latency"),
             ("ttfvt_ms", "first visible token"))


def _ms(v) -> str:
    return "-" if v is None else f"{v:,.1f}"


def format_table(result: dict) -> str:
    lines = [f"{'requests completed / failed':<34}{result['completed']} / {result['failed']}",
             f"{'duration (s)':<34}{result['duration_s']:.2f}",
             f"{'request throughput (req/s)':<34}{result['request_throughput']:.3f}",
             f"{'output throughput (tok/s)':<34}{result['output_throughput']:.2f}",
             f"{'total token throughput (tok/s)':<34}{result['total_token_throughput']:.2f}",
             f"{'input / output / reasoning tokens':<34}{result['total_input_tokens']} / "
             f"{result['total_output_tokens']} / {result['reasoning_tokens']}"]
    if result["no_visible_output"]:
        lines.append(f"{'requests with no visible answer':<34}{result['no_visible_output']} (ended while reasoning)")
    if "goodput" in result:
        lines.append(f"{'goodput (req/s meeting SLOs)':<34}{result['goodput']:.3f} ({result['good_requests']} requests)")
    lines.append(f"{'latency (ms)':<24}{'mean':>10}{'p50':>10}{'p90':>10}{'p99':>10}")
    for key, label in LATENCIES:
        d = result[key]
        lines.append(f"{label:<24}" + "".join(f"{_ms(d[k]):>10}" for k in ("mean", "p50", "p90", "p99")))
    for reason, n in result["failure_reasons"].items():
        lines.append(f"failed x{n}: {reason}")
    for ctx, row in (result.get("by_context") or {}).items():
        lines.append(f"context {ctx:>7}: TTFT p50 {_ms(row['ttft_ms']['p50'])} ms, TPOT p50 {_ms(row['tpot_ms']['p50'])} ms")
    local = result.get("local") or {}
    if local:
        rss = local.get("peak_rss_bytes")
        lines.append(f"{'local: peak RSS':<34}{rss / 2 ** 20:,.0f} MiB" if rss else "local: peak RSS unknown")
        lines.append(f"{'local: experts GB read / token':<34}{local['gb_read_per_token']:.4f} "
                     f"(hit rate {local.get('expert_hit_rate') or 0:.1%}, plan {local['memory_plan']})")
        if "prefix_cache_hit_rate" in local:
            lines.append(f"{'local: prefix cache hit rate':<34}{local['prefix_cache_hit_rate']:.1%} "
                         f"({local['prefix_cache_hits']:,} of {local['prefix_cache_queries']:,} prompt tokens; "
                         f"{local['prefix_cache_snapshots']} snapshots, "
                         f"{local['prefix_cache_snapshot_bytes'] / 2 ** 20:,.1f} MiB)")
        if local.get("spec_windows"):
            lines.append(f"{'local: speculative acceptance':<34}{local['spec_acceptance_rate']:.1%} "
                         f"({local['spec_accepted_tokens']:,} of {local['spec_drafted_tokens']:,} drafts; "
                         f"mean accepted length {local['spec_mean_accepted_length']:.2f})")
    return "\n".join(lines)


def save_records(path: str | Path, result: dict, records: list[RequestRecord]) -> None:
    from k3.checkpoint.writer import atomic_write_text

    atomic_write_text(Path(path), json.dumps({"result": result, "requests": [r.to_dict() for r in records]},
                                             indent=1))


def save_result(args, result: dict) -> Path:
    """--save-result: the result JSON in --result-dir, named --result-filename or as vLLM names its files
    (backend, request rate, model, date). Written to a temporary file, then renamed."""
    import time

    from k3.checkpoint.writer import atomic_write_text

    model = Path(str(result.get("model_id") or args.served_model_name or "endpoint")).name or "endpoint"
    rate = "inf" if args.request_rate == float("inf") else f"{args.request_rate:g}"
    name = args.result_filename or f"k3-{rate}qps-{model}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path = Path(args.result_dir) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    document = result | {"date": time.strftime("%Y%m%d-%H%M%S"), "backend": "k3" if args.model else "openai",
                         "model_id": model, "request_rate": rate, "max_concurrency": args.concurrency}
    atomic_write_text(path, json.dumps(document, indent=1))
    return path


def plot(path: str | Path, result: dict, records: list[RequestRecord]) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ValueError("--plot needs matplotlib: pip install 'k3[bench]'") from None
    ok = [r for r in records if r.ok and not r.warmup]
    sweep = result.get("by_context")
    fig, axes = plt.subplots(1, 4 if sweep else 3, figsize=(16 if sweep else 12, 3.6))
    for ax, (name, values) in zip(axes, (("TTFT (ms)", [r.ttft * 1e3 for r in ok]),
                                         ("TPOT (ms)", [r.tpot * 1e3 for r in ok if r.tpot is not None]),
                                         ("E2E latency (ms)", [r.e2el * 1e3 for r in ok]))):
        ax.hist(values, bins=30, color="#4c72b0")
        ax.set_title(name)
        ax.set_ylabel("requests")
    if sweep:
        ctx = list(sweep)
        axes[3].plot(ctx, [sweep[c]["tpot_ms"]["p50"] for c in ctx], marker="o")
        axes[3].set_xscale("log", base=2)
        axes[3].set_title("TPOT p50 vs context")
        axes[3].set_xlabel("context tokens")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
