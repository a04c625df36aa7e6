"""Prefix caching on against off, side by side in one run, through `k3 bench`'s workloads and local
client, on benchmarks/compare.py's checkpoint (hidden 2048, 8 layers 3:1 KDA:MLA, 64 experts top-8,
MXFP4 experts, bf16 trunk, fp32 compute):

  multi-turn     one conversation of --turns turns, each adding --turn-len new user tokens after the
                 previous (synthetic) reply; a turn waits for the previous answer. TTFT per turn, on/off,
                 the two engines taking turns (turn k on then off, turn k+1 off then on, ...) so that
                 the machine's drift over the run, and going first, hit both alike.
                 A turn k can at best skip the (k-1)/k of its prompt that earlier turns hold, so its
                 ratio's floor is new tokens / prompt tokens: both are printed.
  shared-prefix  --requests requests with a common --prefix-len-token system prompt and short distinct
                 questions, sent together: total time, on/off.

Then the memory the snapshots took here, and what the same snapshots take at K3's real dimensions
(one KDA slot each: 428.6 MiB, tail rows aside).

    .venv/bin/python benchmarks/prefix_cache.py [--turns 8] [--turn-len 1024] [--requests 16] [--prefix-len 2048]
                                                [--only multi-turn|shared-prefix]

Prints a table, then one JSON line. Random weights: speed only (exactness is tested in tests/engine/test_prefix_cache_*.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import torch

import k3
from k3.bench import workloads as wl
from k3.bench.local_client import LocalClient
from k3.bench.main import run_bench
from k3.bench.records import RequestRecord
from k3.config.presets import released
from k3.engine import EngineConfig
from k3.layers.state import state_layout
from k3.testing import make_checkpoint

sys.path.insert(0, str(Path(__file__).parent))
from compare import config as compare_config  # noqa: E402
from scratch import scratch_dir  # noqa: E402

K3_SNAPSHOT = state_layout(released()).slot_bytes(2)   # bf16 conv tails, fp32 recurrent state


def bench(model, prompts, caching: bool, concurrency: int, cache_memory: str):
    client = LocalClient(model, EngineConfig(cache_memory=cache_memory, max_num_seqs=max(8, concurrency),
                                             enable_prefix_caching=caching))
    args = SimpleNamespace(concurrency=concurrency, request_rate=float("inf"), warmup=0, seed=0, goodput=None)
    result, records = run_bench(client, prompts, args)
    return result, sorted(records, key=lambda r: r.index)


async def alternate(clients, prompts) -> list[list[RequestRecord]]:
    """Each prompt sent to both clients, one at a time, which goes first alternating -> records per client."""
    out = [[None] * len(prompts) for _ in clients]
    for i, p in enumerate(prompts):
        for c in (0, 1) if i % 2 == 0 else (1, 0):
            out[c][i] = RequestRecord(i, 0, p.max_tokens)
            await clients[c].send(p, out[c][i])
    return out


def multi_turn(model, turns: int, turn_len: int, reply_len: int, cache_memory: str) -> dict:
    prompts = wl.multi_turn(1, turns, turn_len, reply_len, model.config.vocab_size, seed=1)
    clients = [LocalClient(model, EngineConfig(cache_memory=cache_memory, enable_prefix_caching=on)) for on in (True, False)]
    rec_on, rec_off = asyncio.run(alternate(clients, prompts))
    on = clients[0].local_stats()
    for c in clients:
        asyncio.run(c.close())
    rows, stats = [], {}
    for p, a, b in zip(prompts, rec_on, rec_off):
        ttft_on, ttft_off = a.first_token - a.start, b.first_token - b.start
        rows.append({"turn": p.tag["turn"], "prompt_tokens": len(p.ids), "ttft_on_s": ttft_on, "ttft_off_s": ttft_off,
                     "ratio": ttft_on / ttft_off, "floor": min(1.0, (turn_len + reply_len) / len(p.ids))})
    later = rows[1:]
    stats["ttft_ratio_turns_2_plus_sum"] = sum(r["ttft_on_s"] for r in later) / sum(r["ttft_off_s"] for r in later)
    stats["ttft_ratio_turns_2_plus_max"] = max(r["ratio"] for r in later)
    stats["hit_rate"] = on["prefix_cache_hit_rate"]
    stats["snapshots"] = on["prefix_cache_snapshots"]
    stats["snapshot_bytes"] = on["prefix_cache_snapshot_bytes"]
    return {"turns": rows, **stats}


def shared_prefix(model, requests: int, prefix_len: int, question_len: int, cache_memory: str) -> dict:
    prompts = wl.shared_prefix(requests, prefix_len, prefix_len + question_len, 8, model.config.vocab_size, seed=2)
    on, rec_on = bench(model, prompts, True, requests, cache_memory)
    off, rec_off = bench(model, prompts, False, requests, cache_memory)
    return {"seconds_on": on["duration_s"], "seconds_off": off["duration_s"],
            "speedup": off["duration_s"] / on["duration_s"], "hit_rate": on["local"]["prefix_cache_hit_rate"],
            "snapshots": on["local"]["prefix_cache_snapshots"],
            "snapshot_bytes": on["local"]["prefix_cache_snapshot_bytes"],
            "failed": on["failed"] + off["failed"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--turns", type=int, default=8)
    ap.add_argument("--turn-len", type=int, default=1024)
    ap.add_argument("--reply-len", type=int, default=16)
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--prefix-len", type=int, default=2048)
    ap.add_argument("--question-len", type=int, default=24)
    ap.add_argument("--cache-memory", default="4GiB")
    ap.add_argument("--only", choices=["multi-turn", "shared-prefix"])
    a = ap.parse_args()
    torch.set_num_threads(torch.get_num_threads())
    path = make_checkpoint(scratch_dir("k3-prefix-"), compare_config(), num_shards=4,
                           with_vision=False)
    model = k3.load(path)
    with torch.inference_mode():   # warm up: weights paged in, kernels built, threads started
        model(torch.arange(512).reshape(1, 512) % model.config.vocab_size)
    mt = multi_turn(model, a.turns, a.turn_len, a.reply_len, a.cache_memory) if a.only != "shared-prefix" else None
    sp = shared_prefix(model, a.requests, a.prefix_len, a.question_len, a.cache_memory) if a.only != "multi-turn" \
        else None
    report(a, mt, sp)
    print(json.dumps({"benchmark": "prefix_cache", "multi_turn": mt, "shared_prefix": sp,
                      "k3_snapshot_bytes": K3_SNAPSHOT}))


def report(a, mt: dict | None, sp: dict | None) -> None:
    if mt is not None:
        report_turns(a, mt)
    if sp is not None:
        print(f"shared prefix: {a.requests} requests, {a.prefix_len}-token system prompt: {sp['seconds_off']:.1f} s "
              f"off, {sp['seconds_on']:.1f} s on, {sp['speedup']:.2f}x; hit rate {sp['hit_rate']:.1%}")
    for name, r in (("multi-turn", mt), ("shared prefix", sp)):
        if r is not None:
            print(f"{name} snapshots: {r['snapshots']} holding {r['snapshot_bytes'] / 2 ** 20:.1f} MiB here; "
                  f"at K3's dimensions {r['snapshots'] * K3_SNAPSHOT / 2 ** 30:.2f} GiB")


def report_turns(a, mt: dict) -> None:
    print(f"{'turn':>4} {'prompt':>7} {'TTFT on':>9} {'TTFT off':>9} {'on/off':>7} {'floor':>6}")
    for r in mt["turns"]:
        print(f"{r['turn']:>4} {r['prompt_tokens']:>7} {r['ttft_on_s']:>8.2f}s {r['ttft_off_s']:>8.2f}s "
              f"{r['ratio']:>7.3f} {r['floor']:>6.3f}")
    print(f"multi-turn: turns 2-{a.turns} TTFT on/off {mt['ttft_ratio_turns_2_plus_sum']:.3f} (summed), "
          f"worst turn {mt['ttft_ratio_turns_2_plus_max']:.3f}; hit rate {mt['hit_rate']:.1%}")


if __name__ == "__main__":
    main()
