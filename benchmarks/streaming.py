"""Expert and trunk streaming at K3's real dimensions, against the drive's own sequential read bandwidth.

Writes (once; reused later) a synthetic checkpoint with the released K3 dimensions (hidden 7168,
latent 3584, 96 heads, MXFP4 experts of 17.5 MB) cut to a few layers and experts - tens of GB,
not for CI - then in one run:
  1. the floors: O_DIRECT reads of the shards, 4 of 8 MiB in flight as k3's readers keep them (page
     cache dropped), and RAM reads (a 1 GiB
     bf16 GEMV), GB/s; a token's floor = streamed bytes / disk + resident active bytes / RAM;
  2. decode at batch 1 under a memory budget (trunk resident, a small expert cache, the rest
     streamed): seconds per token, expert GB read per token, achieved GB/s, the time split;
  3. a 32-token prefill chunk: expert reads with chunk-level dedup vs one read per token and expert;
  4. decode with the budget below the trunk (every layer's matrices streamed, the next layer's read in
     flight): the tokens against run 2's (trunk resident), seconds per token against the disk floor
     (bytes read from disk per token / the best bandwidth of reading the streamed matrices' own bytes
     the same way, 4, 8 or 16 reads in flight, page cache dropped);
  5. with --int8: step 4 again on the slice's int8 trunk (`k3 quantize --trunk int8`, written once beside
     it as DIR-int8, hard links to its shards): tokens against that checkpoint's trunk-resident decode;
  6. the plan for the released model at 32, 48 and 64 GB with a 7 GB/s drive: its bf16 trunk, an int8
     trunk quantised at load (resident layers int8, streamed ones read as bf16), and the int8 checkpoint.

    .venv/bin/python benchmarks/streaming.py [--dir .bench/k3-slice] [--layers 4] [--experts 256] [--int8]

Prints a table, then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

from k3.config.presets import released, shrink
from k3.engine import LLM, SamplingParams
from k3.streaming import minimum_budget, plan_memory
from k3.testing import make_checkpoint

def drop_cache(d: Path) -> None:
    for p in d.glob("*.safetensors"):
        fd = os.open(p, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)


def sequential_floor(d: Path, ranges: list[tuple[Path, int, int]] | None = None, limit: int = 8 * 2 ** 30,
                     threads: int = 4, block: int = 8 * 2 ** 20, passes: int = 1) -> float:
    """GB/s of large O_DIRECT reads (buffered if O_DIRECT is refused), page cache dropped before each pass,
    with `threads` reads of `block` bytes in flight: the queue depth k3's readers keep. `ranges` (file,
    start, end): exactly these bytes (the best of `passes`), else the shards' first `limit` bytes."""
    if ranges is None:
        ranges = [(p, 0, p.stat().st_size) for p in sorted(d.glob("*.safetensors"), key=lambda p: -p.stat().st_size)]
    jobs, total = [], 0
    for p, start, end in ranges:
        for pos in range(start // 4096 * 4096, end, block):
            if total < limit:
                jobs.append((p, pos))
                total += block
    local, opened = threading.local(), []

    def read(job) -> int:
        if not hasattr(local, "buf"):
            local.buf, local.fds = mmap.mmap(-1, block), {}
        p, pos = job
        if p not in local.fds:
            try:
                local.fds[p] = os.open(p, os.O_RDONLY | getattr(os, "O_DIRECT", 0))
            except OSError:
                local.fds[p] = os.open(p, os.O_RDONLY)
            opened.append(local.fds[p])
        return os.preadv(local.fds[p], [local.buf], pos)

    best = 0.0
    for _ in range(passes):
        drop_cache(d)
        t0 = time.perf_counter()
        with ThreadPoolExecutor(threads) as pool:
            done = sum(pool.map(read, jobs))
        best = max(best, done / (time.perf_counter() - t0) / 1e9)
    for fd in opened:  # each pass's threads opened their own
        os.close(fd)
    return best


def trunk_ranges(d: Path, config) -> list[tuple[Path, int, int]]:
    """Every layer's streamed matrices, as (file, start, end), in the order the trunk store reads them."""
    from k3.checkpoint import CheckpointReader
    from k3.streaming.trunk import trunk_extents

    extents = trunk_extents(CheckpointReader(d), config, tuple(range(config.num_hidden_layers)))
    return [(d / p.file, p.offset, p.offset + p.nbytes) for layer in sorted(extents) for p in extents[layer]]


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


def timed_decode(d: Path, budget: int, tokens: int) -> tuple[LLM, dict, dict, float, list[int]]:
    """(engine, stats before, stats after, seconds, token ids) of `tokens` decode steps after the first."""
    drop_cache(d)
    llm = LLM(str(d), max_num_seqs=1, cache_memory="256MiB", memory_budget=budget)
    params = SamplingParams(max_tokens=tokens + 1, temperature=0.0, ignore_eos=True)
    outs = llm.stream([[11, 12, 13]], params)
    next(outs)  # prefill + first token: not counted
    before = llm.engine.stats()
    t0 = time.perf_counter()
    for out in outs:
        ids = out.token_ids
    return llm, before, llm.engine.stats(), time.perf_counter() - t0, list(ids)


def decode(d: Path, budget: int, tokens: int) -> dict:
    llm, before, after, seconds, ids = timed_decode(d, budget, tokens)
    read = after["expert_bytes_read"] - before["expert_bytes_read"]
    waited = after["wait_seconds"] - before["wait_seconds"]
    hits = after["expert_hits"] - before["expert_hits"]
    reads = after["expert_reads"] - before["expert_reads"]
    return {"s_per_token": seconds / tokens, "expert_gb_per_token": read / tokens / 1e9,
            "achieved_gb_s": read / seconds / 1e9, "wait_share": waited / seconds,
            "hit_rate": hits / max(1, hits + reads), "direct_io": after["direct_io"],
            "plan": llm.model.memory_plan.to_dict(), "token_ids": ids}


def trunk_decode(d: Path, config, tokens: int) -> dict:
    """Decode with every layer's matrices streamed (the budget below the trunk), against the disk floor:
    the bytes read per token over the bandwidth of reading those same bytes (the best of two passes at 4,
    8 and 16 reads in flight, before and after the run, so a drive's or a virtual disk's own cache helps
    the floor at least as much as the run)."""
    ranges = trunk_ranges(d, config)

    def floor_gb_s() -> float:
        return max(sequential_floor(d, ranges, limit=1 << 62, passes=2, threads=t) for t in (4, 8, 16))

    before_run = floor_gb_s()
    budget = minimum_budget(config, state_bytes=256 * 2 ** 20) + 2 ** 29   # a 0.5 GiB expert cache
    llm, before, after, seconds, ids = timed_decode(d, budget, tokens)
    disk_gb_s = max(before_run, floor_gb_s())   # the disk's best, measured on both sides of the run
    plan = llm.model.memory_plan
    assert plan.mode == "stream-trunk", plan.mode
    trunk = after["trunk_bytes_read"] - before["trunk_bytes_read"]
    experts = after["expert_bytes_read"] - before["expert_bytes_read"]
    floor_s = (trunk + experts) / tokens / 1e9 / disk_gb_s
    return {"budget": budget, "streamed_layers": len(plan.streamed_layers), "s_per_token": seconds / tokens,
            "trunk_gb_per_token": trunk / tokens / 1e9, "expert_gb_per_token": experts / tokens / 1e9,
            "disk_gb_s": disk_gb_s, "disk_floor_s": floor_s, "ratio_to_disk_floor": seconds / tokens / floor_s,
            "wait_share": (after["trunk_wait_seconds"] - before["trunk_wait_seconds"]
                           + after["wait_seconds"] - before["wait_seconds"]) / seconds,
            "direct_io": after["trunk_direct_io"], "token_ids": ids}


TRUNKS = {"bf16": (released(), False), "int8 at load": (released(), True),
          "int8 checkpoint": (released().replace(trunk_format="int8"), False)}


def released_plans(disk: float = 7e9, mem: float = 40e9) -> dict:
    out = {}
    for trunk, (config, at_load) in TRUNKS.items():
        for gb in (32, 48, 64):
            p = plan_memory(config, gb * 10 ** 9, state_bytes=2 ** 30, int8_at_load=at_load)
            out[f"{trunk}, {gb} GB"] = {
                "mode": p.mode, "streamed_layers": len(p.streamed_layers), "resident_gb": p.resident_bytes / 1e9,
                "trunk_streamed_gb": p.trunk_streamed_bytes_per_token / 1e9,
                "expert_streamed_gb": (p.streamed_bytes_per_token - p.trunk_streamed_bytes_per_token) / 1e9,
                "s_per_token": p.seconds_per_token(disk, mem)}
    return out


def int8_trunk_decode(d: Path, tokens: int) -> dict:
    """Step 4 on the slice's int8 trunk (written once as d-int8): tokens against its resident decode."""
    from k3.config import load_config
    from k3.tools.quantize_trunk import quantize_trunk

    q = d.with_name(d.name + "-int8")
    if not (q / "model.safetensors.index.json").is_file():
        print(f"writing the slice's int8 trunk to {q} (once) ...", flush=True)
        quantize_trunk(d, q, log=lambda m: None)
    config = load_config(q)
    p = plan_memory(config, 10 ** 13, state_bytes=256 * 2 ** 20)
    resident = decode(q, p.trunk_bytes + p.state_bytes + 2 * 10 ** 9, tokens)
    streamed = trunk_decode(q, config, tokens)
    return streamed | {"tokens_identical": streamed.pop("token_ids") == resident.pop("token_ids"),
                       "resident_s_per_token": resident["s_per_token"]}


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
    ap.add_argument("--int8", action="store_true", help="also stream the slice's int8 trunk (step 5)")
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
    trunk = trunk_decode(d, config, args.tokens)
    same = trunk.pop("token_ids") == dec.pop("token_ids")
    int8 = int8_trunk_decode(d, args.tokens) if args.int8 else None
    plans = released_plans()
    # The physical floor of a token: streamed expert bytes from the drive + resident active bytes from RAM.
    resident_gb = (p.trunk_bytes + dec["plan"]["expert_bytes_per_token"] * dec["hit_rate"]) / 1e9
    floor_s = dec["expert_gb_per_token"] / floor + resident_gb / mem
    rows = [("checkpoint on disk (GB)", size / 1e9), ("sequential read floor (GB/s)", floor),
            ("RAM read floor (GB/s)", mem), ("resident GB read per token", resident_gb),
            ("decode s/token", dec["s_per_token"]), ("expert GB read per token", dec["expert_gb_per_token"]),
            ("achieved expert GB/s", dec["achieved_gb_s"]), ("floor time, disk + RAM (s)", floor_s),
            ("decode time / floor time", dec["s_per_token"] / floor_s), ("share of time waiting on reads",
                                                                          dec["wait_share"]),
            ("expert cache hit rate", dec["hit_rate"]), ("prefill dedup factor (chunk 32)", pre["dedup_factor"]),
            ("trunk streamed: layers", trunk["streamed_layers"]), ("trunk streamed: s/token", trunk["s_per_token"]),
            ("trunk streamed: disk GB per token", trunk["trunk_gb_per_token"] + trunk["expert_gb_per_token"]),
            ("trunk streamed: its bytes' read GB/s", trunk["disk_gb_s"]),
            ("trunk streamed: disk floor (s)", trunk["disk_floor_s"]),
            ("trunk streamed: time / disk floor", trunk["ratio_to_disk_floor"]),
            ("trunk streamed: tokens identical", float(same))]
    if int8 is not None:
        rows += [("int8 trunk streamed: s/token", int8["s_per_token"]),
                 ("int8 trunk streamed: disk GB per token", int8["trunk_gb_per_token"] + int8["expert_gb_per_token"]),
                 ("int8 trunk streamed: its bytes' read GB/s", int8["disk_gb_s"]),
                 ("int8 trunk streamed: time / disk floor", int8["ratio_to_disk_floor"]),
                 ("int8 trunk streamed: tokens identical", float(int8["tokens_identical"]))]
    rows += [(f"released K3, {key}, 7 GB/s: s/token", p["s_per_token"]) for key, p in plans.items()]
    for name, value in rows:
        print(f"{name:<48}{value:>12.3f}")
    print(json.dumps({"layers": args.layers, "experts": args.experts, "bytes": size, "floor_gb_s": floor,
                      "ram_gb_s": mem, "floor_s": floor_s,
                      "decode": dec, "prefill": pre, "ratio_to_floor": dec["s_per_token"] / floor_s,
                      "trunk_streaming": trunk | {"tokens_identical": same}, "int8_trunk_streaming": int8,
                      "released_plans": plans}))


if __name__ == "__main__":
    main()
