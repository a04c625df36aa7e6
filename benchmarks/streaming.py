"""Expert streaming at K3's real dimensions, against the drive's own sequential read bandwidth.

Writes (once; reused later) a synthetic checkpoint with the released K3 dimensions (hidden 7168,
latent 3584, 96 heads, MXFP4 experts of 17.5 MB) cut to a few layers and experts - tens of GB,
not for CI - then in one run:
  1. the floors: sequential O_DIRECT reads of the shards (page cache dropped) and RAM reads (a 1 GiB
     bf16 GEMV), GB/s; a token's floor = streamed bytes / disk + resident active bytes / RAM;
  2. decode at batch 1 under a memory budget (trunk resident, a small expert cache, the rest
     streamed): seconds per token, expert GB read per token, achieved GB/s, the time split;
  3. a 32-token prefill chunk: expert reads with chunk-level dedup vs one read per token and expert.

    .venv/bin/python benchmarks/streaming.py [--dir .bench/k3-slice] [--layers 4] [--experts 256]

Prints a table, then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import time
from pathlib import Path

import torch

from k3.config.presets import released, shrink
from k3.engine import LLM, SamplingParams
from k3.offload import plan_memory
from k3.testing import make_checkpoint

BLOCK = 64 * 2 ** 20


def drop_cache(d: Path) -> None:
    for p in d.glob("*.safetensors"):
        fd = os.open(p, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)


def sequential_floor(d: Path, limit: int = 8 * 2 ** 30) -> float:
    """GB/s of large sequential O_DIRECT reads over the shards (buffered if O_DIRECT is refused)."""
    drop_cache(d)
    buf = mmap.mmap(-1, BLOCK)
    done, t0 = 0, time.perf_counter()
    for p in sorted(d.glob("*.safetensors"), key=lambda p: -p.stat().st_size):
        try:
            fd = os.open(p, os.O_RDONLY | getattr(os, "O_DIRECT", 0))
        except OSError:
            fd = os.open(p, os.O_RDONLY)
        pos = 0
        while done < limit:
            n = os.preadv(fd, [buf], pos)
            if n <= 0:
                break
            pos, done = pos + n, done + n
        os.close(fd)
        if done >= limit:
            break
    return done / (time.perf_counter() - t0) / 1e9


def memory_floor_gb_s() -> float:
    """RAM read bandwidth from k3's native bf16 GEMV over 1 GiB (best of 3): the trunk's floor."""
    from k3.ops.native import native

    w = torch.ones(2 ** 16, 8192, dtype=torch.bfloat16)
    x = torch.ones(1, 8192)
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        native().bf16_linear(x, w)
        best = min(best, time.perf_counter() - t0)
    return w.numel() * 2 / best / 1e9


def decode(d: Path, budget: int, tokens: int) -> dict:
    drop_cache(d)
    llm = LLM(str(d), max_num_seqs=1, cache_memory="256MiB", memory_budget=budget)
    params = SamplingParams(max_tokens=tokens + 1, temperature=0.0, ignore_eos=True)
    outs = llm.stream([[11, 12, 13]], params)
    next(outs)  # prefill + first token: not counted
    before = llm.engine.stats()
    t0 = time.perf_counter()
    for _ in outs:
        pass
    seconds = time.perf_counter() - t0
    after = llm.engine.stats()
    read = after["expert_bytes_read"] - before["expert_bytes_read"]
    waited = after["wait_seconds"] - before["wait_seconds"]
    hits = after["expert_hits"] - before["expert_hits"]
    reads = after["expert_reads"] - before["expert_reads"]
    return {"s_per_token": seconds / tokens, "expert_gb_per_token": read / tokens / 1e9,
            "achieved_gb_s": read / seconds / 1e9, "wait_share": waited / seconds,
            "hit_rate": hits / max(1, hits + reads), "direct_io": after["direct_io"],
            "plan": llm.model.memory_plan.to_dict()}


def prefill_dedup(d: Path, budget: int, chunk: int = 32) -> dict:
    llm = LLM(str(d), max_num_seqs=1, cache_memory="256MiB", memory_budget=budget, max_num_batched_tokens=chunk)
    ids = torch.randint(0, 163840, (chunk,), generator=torch.Generator().manual_seed(0)).tolist()
    t0 = time.perf_counter()
    llm.generate([ids], SamplingParams(max_tokens=1))
    stats, c = llm.engine.stats(), llm.model.config
    uses = chunk * c.num_experts_per_token * len(c.moe_layers)
    requested = stats["expert_reads"] + stats["expert_hits"]
    return {"chunk": chunk, "expert_uses": uses, "expert_loads": requested, "dedup_factor": uses / requested,
            "prefill_s": time.perf_counter() - t0}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default=".bench/k3-slice")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--experts", type=int, default=256)
    ap.add_argument("--tokens", type=int, default=6)
    ap.add_argument("--cache-gb", type=float, default=2.0, help="expert cache inside the budget")
    args = ap.parse_args()
    config = shrink(released(), args.layers, args.experts)
    d = Path(args.dir)
    if not (d / "config.json").is_file():
        print(f"writing a {args.layers}-layer, {args.experts}-expert slice of K3 to {d} (once) ...", flush=True)
        make_checkpoint(d, config, num_shards=max(2, args.layers), with_vision=False)
    size = sum(p.stat().st_size for p in d.glob("*.safetensors"))
    p = plan_memory(config, 10 ** 13, state_bytes=256 * 2 ** 20)
    budget = p.trunk_bytes + p.state_bytes + int(args.cache_gb * 1e9)
    floor = sequential_floor(d)
    mem = memory_floor_gb_s()
    dec = decode(d, budget, args.tokens)
    pre = prefill_dedup(d, budget)
    # The physical floor of a token: streamed expert bytes from the drive + resident active bytes from RAM.
    resident_gb = (p.trunk_bytes + dec["plan"]["expert_bytes_per_token"] * dec["hit_rate"]) / 1e9
    floor_s = dec["expert_gb_per_token"] / floor + resident_gb / mem
    rows = [("checkpoint on disk (GB)", size / 1e9), ("sequential read floor (GB/s)", floor),
            ("RAM read floor (GB/s)", mem), ("resident GB read per token", resident_gb),
            ("decode s/token", dec["s_per_token"]), ("expert GB read per token", dec["expert_gb_per_token"]),
            ("achieved expert GB/s", dec["achieved_gb_s"]), ("floor time, disk + RAM (s)", floor_s),
            ("decode time / floor time", dec["s_per_token"] / floor_s), ("share of time waiting on reads",
                                                                          dec["wait_share"]),
            ("expert cache hit rate", dec["hit_rate"]), ("prefill dedup factor (chunk 32)", pre["dedup_factor"])]
    for name, value in rows:
        print(f"{name:<36}{value:>12.3f}")
    print(json.dumps({"layers": args.layers, "experts": args.experts, "bytes": size, "floor_gb_s": floor,
                      "ram_gb_s": mem, "floor_s": floor_s,
                      "decode": dec, "prefill": pre, "ratio_to_floor": dec["s_per_token"] / floor_s}))


if __name__ == "__main__":
    main()
