"""Speculative decoding, side by side in one run (plain and speculative runs alternate; best of --rounds):

    .venv/bin/python benchmarks/speculative.py [--rounds 2] [--tokens 96] [--only random,bundled,streamed]
                                               [--drafter DIR]

1. random: compare.py's checkpoint (random weights in K3's proportions: hidden 2048, 8 layers 3:1
   KDA:MLA, 64 MXFP4 experts top-8; bf16 trunk), batch 1 after a 64-token prompt, greedy.
   - window cost: one forward over a verify window of T positions against one token's forward timed
     just before it (median over repetitions).
   - copy: decode tokens/s when the output copies text the drafter can see. A random model never
     copies its prompt by itself, so the drafter replays the plain run's own output (what prompt
     lookup proposes when the output is a copy: every draft right).
   - novel: prompt-lookup (n-gram) drafting on the random model's output, which copies nothing: the
     price of looking and of the windows it tries before backing off.
2. bundled: the default model on English prompts, with n-gram drafting and with a draft model
   (--drafter, default: the one shipped in the package, if any): acceptance and speedup.
3. streamed: compare.py's checkpoint under a memory budget holding --stream-slots experts (24, fewer
   than the 56 one token routes to; the rest streamed from the shards), copy workload: expert bytes
   read per output token, with and without.

Prints a table, then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from compare import config as compare_config  # noqa: E402
from scratch import scratch_dir  # noqa: E402

import k3  # noqa: E402
from k3.engine import LLM, SamplingParams  # noqa: E402
from k3.engine.scheduled import ScheduledChunk, SchedulerOutput  # noqa: E402
from k3.engine.speculative import Drafter, SpeculativeConfig  # noqa: E402
from k3.streaming import plan_memory  # noqa: E402
from k3.testing import make_checkpoint  # noqa: E402

ENGLISH = ["The old house at the end of the lane had been empty for years, and",
           "In the beginning of the war, when the town was still",
           "She wrote to her sister every week, telling her of the people she met and",
           "And the LORD spake unto Moses, saying,"]


class ReplayProposer:
    """Drafts the continuation a plain run produced: the output copies text the drafter holds."""

    def __init__(self, sequences: list[list[int]]):
        self.sequences = sequences

    def propose(self, items):
        out = []
        for ids, k in items:
            seq = next(s for s in self.sequences if s[:len(ids)] == list(ids))
            out.append(seq[len(ids):len(ids) + k])
        return out


def decode_rate(llm: LLM, prompts, n: int) -> tuple[float, list]:
    """Greedy decode tokens/s after the prompts are in (prefill and first token excluded)."""
    engine = llm.engine
    ids = [engine.add_request(p, SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True)) for p in prompts]
    done: dict = {}
    first = None
    while engine.has_unfinished():
        for o in engine.step():
            if o.finished:
                done[o.request_id] = o
        if first is None and all(engine.requests[i].output_ids for i in ids if i in engine.requests):
            first = (time.perf_counter(), sum(len(engine.requests[i].output_ids) for i in ids if i in engine.requests))
    t, counted = first
    outs = [done[i] for i in ids]
    return (sum(len(o.token_ids) for o in outs) - counted) / (time.perf_counter() - t), outs


def spec_stats(llm: LLM) -> dict:
    return {k: v for k, v in llm.engine.stats().items() if k.startswith("spec_")}


def window_costs(model, reps: int = 9) -> dict:
    llm = LLM(model, cache_memory="256MiB", enable_prefix_caching=False)
    engine = llm.engine
    rid = engine.add_request(list(range(100, 164)), SamplingParams(max_tokens=64, temperature=0.0, ignore_eos=True))
    engine.step()
    req = engine.requests[rid]
    placement = engine.allocator.placement(rid)

    rollback = []

    def forward(T: int) -> float:
        chunk = ScheduledChunk(req, T, placement, tuple(range(200, 199 + T)))
        t0 = time.perf_counter()
        result = engine.runner.execute(SchedulerOutput(chunks=[chunk]))
        seconds = time.perf_counter() - t0
        t0 = time.perf_counter()
        engine.runner.keep_windows(result, {rid: 1})   # restore, replay the pending token
        if T > 1:                                       # a rejection to undo
            rollback.append(time.perf_counter() - t0)
        return seconds

    # Every window size once a repetition, each right after a one-token forward, and the cost the median
    # over repetitions of the pair's ratio: each window is divided by a token timed in the same memory
    # phase (the VM's bandwidth moves within seconds; timed one size after another, the T=5 ratio ran
    # from 1.8x to 2.6x between runs of one code base).
    sizes = (2, 3, 5, 9, 17)
    forward(1)   # warm-up
    ones, ratios = [], {T: [] for T in sizes}
    for _ in range(reps):
        for T in sizes:
            ones.append(forward(1))
            ratios[T].append(forward(T) / ones[-1])
    one = statistics.median(ones)
    costs = {f"T={T}": statistics.median(r) for T, r in ratios.items()}
    from k3.engine.memory.sequence_state import export_kda

    slots = engine.runner.pools.slots
    copy = min(_timed(lambda: export_kda(slots, placement.slot)) for _ in range(reps))
    return {"one_token_ms": one * 1e3, **costs, "rollback_ms": min(rollback) * 1e3,
            "kda_state_copy_ms": copy * 1e3}


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def random_part(model, args) -> dict:
    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, 30000, (64,), generator=g).tolist()
    out = {"window_cost_vs_one_token": window_costs(model)}
    plain_llm = LLM(model, cache_memory="1GiB", enable_prefix_caching=False)
    runs: dict[str, list[float]] = {"plain": [], "novel ngram k=4": [], "copy k=4": [], "copy k=8": []}
    stats = {}
    for _ in range(args.rounds):
        # Each round: plain, then n-gram on the same output (the pair whose ratio is the overhead),
        # then the copies, then plain again (drift between the first and last runs hits both sides).
        rate, (ref,) = decode_rate(plain_llm, [prompt], args.tokens)
        runs["plain"].append(rate)
        llm = LLM(model, cache_memory="1GiB", enable_prefix_caching=False, speculative_config={
            "method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2})
        rate, (o,) = decode_rate(llm, [prompt], args.tokens)
        assert o.token_ids == ref.token_ids
        runs["novel ngram k=4"].append(rate)
        stats["novel ngram k=4"] = spec_stats(llm)
        for k in (4, 8):
            llm = LLM(model, cache_memory="1GiB", enable_prefix_caching=False,
                      speculative_config={"method": "ngram", "num_speculative_tokens": k})
            llm.engine.drafter = Drafter(llm.engine.drafter.config, ReplayProposer([prompt + ref.token_ids]))
            rate, (o,) = decode_rate(llm, [prompt], args.tokens)
            assert o.token_ids == ref.token_ids, "speculation changed greedy output"
            runs[f"copy k={k}"].append(rate)
            stats[f"copy k={k}"] = spec_stats(llm)
        runs["plain"].append(decode_rate(plain_llm, [prompt], args.tokens)[0])
    best = {k: max(v) for k, v in runs.items()}
    out |= {"tokens_per_s": best, "runs": runs, "spec": stats,
            "speedup": {k: v / best["plain"] for k, v in best.items() if k != "plain"}}
    return out


def bundled_part(args) -> dict:
    from k3.defaults import default_model

    path = str(default_model())
    drafter = args.drafter or _shipped_drafter()
    configs = {"ngram k=4": {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4,
                             "prompt_lookup_min": 2}}
    if drafter:
        for k in (2, 4):
            configs[f"draft model k={k}"] = {"method": "draft_model", "model": drafter, "num_speculative_tokens": k}
    plain = LLM(path, cache_memory="256MiB", enable_prefix_caching=False)
    prompts = [plain.tokenizer.encode(t, special=False) for t in ENGLISH]
    runs = {name: [] for name in ["plain", *configs]}
    stats = {}
    for _ in range(args.rounds):
        rate, ref = decode_rate(plain, prompts[:1], args.tokens)
        runs["plain"].append(rate)
        for name, cfg in configs.items():
            llm = LLM(path, cache_memory="256MiB", enable_prefix_caching=False, speculative_config=cfg)
            rate, outs = decode_rate(llm, prompts[:1], args.tokens)
            assert outs[0].token_ids == ref[0].token_ids, name
            runs[name].append(rate)
            # Acceptance over all four prompts (one run, not timed).
            llm2 = LLM(path, cache_memory="256MiB", enable_prefix_caching=False, speculative_config=cfg)
            llm2.generate(prompts, SamplingParams(max_tokens=args.tokens, temperature=0.0, ignore_eos=True))
            stats[name] = spec_stats(llm2)
    best = {k: max(v) for k, v in runs.items()}
    return {"drafter": drafter, "tokens_per_s": best, "runs": runs, "spec": stats,
            "speedup": {k: v / best["plain"] for k, v in best.items() if k != "plain"}}


def _shipped_drafter() -> str | None:
    from k3.defaults import default_drafter

    path = default_drafter()
    return None if path is None else str(path)


def streamed_part(path: Path, args) -> dict:
    c = compare_config()
    p = plan_memory(c, 10 ** 12)
    # Fewer expert slots than one token routes to (8 x 7 layers): each token must read most of its experts.
    budget = p.trunk_bytes + (256 << 20) + args.stream_slots * p.expert_bytes   # the cache_memory below: 256 MiB
    g = torch.Generator().manual_seed(1)
    prompt = torch.randint(0, 30000, (64,), generator=g).tolist()
    out = {}
    ref = None
    for name, cfg in (("plain", None), ("copy k=4", {"method": "ngram", "num_speculative_tokens": 4})):
        llm = LLM(str(path), cache_memory="256MiB", memory_budget=budget, enable_prefix_caching=False,
                  speculative_config=cfg)
        if cfg is not None:
            llm.engine.drafter = Drafter(SpeculativeConfig.parse(cfg), ReplayProposer([prompt + ref.token_ids]))
        rate, (o,) = decode_rate(llm, [prompt], args.tokens)
        ref = ref or o
        st = llm.engine.stats()
        out[name] = {"tokens_per_s": rate, "expert_bytes_per_output_token": st["expert_bytes_read"] / st["generated_tokens"],
                     "expert_hit_rate": st["expert_hit_rate"], "plan": llm.model.memory_plan.mode,
                     "expert_slots": llm.model.memory_plan.expert_slots}
    out["bytes_ratio_spec_over_plain"] = (out["copy k=4"]["expert_bytes_per_output_token"]
                                          / out["plain"]["expert_bytes_per_output_token"])
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=96)
    ap.add_argument("--only", default="random,bundled,streamed")
    ap.add_argument("--drafter", default=None, help="draft checkpoint for the bundled model")
    ap.add_argument("--stream-slots", type=int, default=24, help="experts the streamed part keeps in memory")
    args = ap.parse_args()
    torch.set_grad_enabled(False)
    parts = set(args.only.split(","))
    result: dict = {}
    path = None
    if parts & {"random", "streamed"}:
        path = make_checkpoint(scratch_dir("k3-spec-"), compare_config(), num_shards=4,
                               with_vision=False)
    if "random" in parts:
        result["random"] = random_part(k3.load(str(path)), args)
    if "bundled" in parts:
        result["bundled"] = bundled_part(args)
    if "streamed" in parts:
        result["streamed"] = streamed_part(path, args)
    print(report(result))
    print(json.dumps(result))


def report(r: dict) -> str:
    lines = []
    if "random" in r:
        w = r["random"]["window_cost_vs_one_token"]
        lines.append(f"random checkpoint: one-token forward {w['one_token_ms']:.1f} ms; a window of T costs "
                     + ", ".join(f"{k} {v:.2f}x" for k, v in w.items() if k.startswith("T=")))
        lines.append(f"  undoing a rejection (restore + replay one position) {w['rollback_ms']:.2f} ms; "
                     f"one copy of the KDA state {w['kda_state_copy_ms']:.2f} ms (per-position states: one per draft)")
        lines += _rates("random", r["random"])
    if "bundled" in r:
        lines.append(f"bundled model (drafter: {r['bundled']['drafter'] or 'none shipped'})")
        lines += _rates("bundled", r["bundled"])
    if "streamed" in r:
        s = r["streamed"]
        for name in ("plain", "copy k=4"):
            lines.append(f"streamed {name:<10} {s[name]['tokens_per_s']:7.2f} tok/s, "
                         f"{s[name]['expert_bytes_per_output_token'] / 1e6:8.2f} MB of experts read per output token "
                         f"(hit rate {s[name]['expert_hit_rate']:.1%}, {s[name]['expert_slots']} expert slots)")
        lines.append(f"streamed: bytes read per output token, speculative / plain = {s['bytes_ratio_spec_over_plain']:.2f}")
    return "\n".join(lines)


def _rates(part: str, r: dict) -> list[str]:
    lines = [f"  {'':<20}{'tok/s':>9}{'vs plain':>10}{'accepted':>10}{'per step':>10}"]
    for name, rate in r["tokens_per_s"].items():
        st = r["spec"].get(name, {})
        ratio = "" if name == "plain" else f"{r['speedup'][name]:.2f}x"
        acc = f"{st['spec_acceptance_rate']:.0%}" if st.get("spec_drafted_tokens") else ""
        per = f"{st['spec_mean_accepted_length']:.2f}" if st.get("spec_windows") else ""
        lines.append(f"  {name:<20}{rate:>9.2f}{ratio:>10}{acc:>10}{per:>10}")
    return lines


if __name__ == "__main__":
    main()
