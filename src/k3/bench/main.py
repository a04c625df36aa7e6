"""`k3 bench` as a library call: build the workload and the client, run, aggregate."""

from __future__ import annotations

import asyncio

from k3.bench import workloads as wl
from k3.bench.metrics import by_tag, summarize
from k3.bench.runner import run_workload

SLO_NAMES = ("ttft", "tpot", "e2el", "ttfvt")


def parse_goodput(items: list[str] | None) -> dict[str, float] | None:
    """["ttft:500", "tpot:50"] -> {"ttft": 500.0, "tpot": 50.0} (milliseconds, as vLLM's --goodput)."""
    if not items:
        return None
    slos = {}
    for item in items:
        name, _, value = item.partition(":")
        if name not in SLO_NAMES or not value:
            raise ValueError(f"--goodput {item!r}: expected NAME:MS with NAME one of {', '.join(SLO_NAMES)}")
        slos[name] = float(value)
    return slos


def build_workload(args, vocab: int) -> list:
    prompts = _workload(args, vocab)
    if getattr(args, "images_per_prompt", 0):
        if args.dataset:
            raise ValueError("--images-per-prompt makes synthetic images; a dataset names its own (\"images\": [files])")
        from k3.bench.images import parse_size, with_images

        prompts = with_images(prompts, args.images_per_prompt, parse_size(args.image_size), args.seed)
    return prompts


def _workload(args, vocab: int) -> list:
    if args.dataset:
        return wl.from_jsonl(args.dataset, args.output_len, args.num_prompts)
    if args.workload == "fixed":
        return wl.fixed(args.num_prompts, args.input_len, args.output_len, vocab, args.seed)
    if args.workload == "context-sweep":
        contexts = [int(c) for c in args.contexts.split(",")]
        return wl.context_sweep(contexts, args.per_context, args.output_len, vocab, args.seed)
    if args.workload == "shared-prefix":
        return wl.shared_prefix(args.num_prompts, args.prefix_len, args.input_len, args.output_len, vocab, args.seed)
    if args.workload == "multi-turn":
        return wl.multi_turn(max(1, args.num_prompts // args.turns), args.turns, args.input_len, args.output_len,
                             vocab, args.seed)
    raise ValueError(f"--workload {args.workload!r}: expected fixed, context-sweep, shared-prefix or multi-turn")


def run_bench(client, prompts, args, tick=lambda: None) -> tuple[dict, list]:
    async def go():
        try:
            return await run_workload(client, prompts, concurrency=args.concurrency,
                                      request_rate=args.request_rate, warmup=args.warmup, seed=args.seed, tick=tick)
        finally:
            await client.close()

    records, duration = asyncio.run(go())
    result = summarize(records, duration, parse_goodput(args.goodput))
    if any("context" in r.tag for r in records):
        result["by_context"] = by_tag(records, "context")
    result["local"] = client.local_stats()
    result["settings"] = {k: ("inf" if v == float("inf") else v) for k, v in vars(args).items()
                          if k not in ("module", "api_key")}
    return result, records
