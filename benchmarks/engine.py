"""The engine against a bare loop, and decode against context length and batch size, side by side in one
run, on two random checkpoints in the official layout (bf16 trunk as stored, MXFP4 experts, fp32 compute):
`small` (hidden 1024, 8 layers, 32 experts top-4) and `compare` (benchmarks/compare.py's: hidden 2048,
8 layers, 64 experts top-8).

For each checkpoint:
  engine / bare      batch-1 greedy decode through `LLM.generate`'s engine against a bare loop that calls
                     the model with a dense state (target >= 0.95)
  8K, 16K / 256      decode tokens/s with 8,192 and 16,384 cached tokens against 256 (targets >= 0.9 and
                     >= 0.85), beside the ratio the bytes alone allow (weights + cache read at 256 over
                     weights + cache read at that context); the context is a saved-state import (random
                     MLA latents, zero KDA state), so no long prefill
  batch 32 / 1       decode throughput (target >= 10)
  bytes per token    weights read per decode token next to cache bytes read per token at each context

    .venv/bin/python benchmarks/engine.py [--decode-tokens 24] [--rounds 3] [--only small|compare]

Each round runs every measurement once, in turn, so drift in the machine hits all of them; each rate is
the best of its rounds. Prints a table per checkpoint, then one JSON line. Random weights: speed only.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

import k3
from k3.config.presets import mid
from k3.engine import LLM, SamplingParams
from k3.engine.memory.sequence_state import SequenceState
from k3.streaming.plan import expert_sizes, weight_bytes
from k3.testing import make_checkpoint

sys.path.insert(0, str(Path(__file__).parent))
from compare import config as compare_config  # noqa: E402

PROMPT = 32
CONTEXTS = (256, 8192, 16384)


def prompt(length: int, vocab: int, salt: int = 0) -> list[int]:
    g = torch.Generator().manual_seed(length * 1000 + salt)
    return torch.randint(0, vocab, (length,), generator=g).tolist()


def bare_rate(model, tokens: int) -> float:
    """Greedy decode tokens/s of a plain loop: model(ids, dense state), argmax, feed back."""
    vocab = model.config.vocab_size
    with torch.inference_mode():
        state = model.new_state(1)
        tok = int(model(torch.tensor([prompt(PROMPT, vocab)]), state)[0, -1].argmax())
        for _ in range(2):
            tok = int(model(torch.tensor([[tok]]), state)[0, -1].argmax())
        t = time.perf_counter()
        for _ in range(tokens):
            tok = int(model(torch.tensor([[tok]]), state)[0, -1].argmax())
        return tokens / (time.perf_counter() - t)


def engine_rate(llm: LLM, prompts: list[list[int]], tokens: int, states=None) -> float:
    """Generated tokens/s once every request has its first token (prefill and imports excluded)."""
    engine = llm.engine
    params = SamplingParams(max_tokens=tokens + 3, temperature=0.0, ignore_eos=True)
    for i, p in enumerate(prompts):
        engine.add_request(p, params, resume_state=None if states is None else states[i])
    while engine.stats()["generated_tokens"] < 3 * len(prompts):   # first token, then two warm-up steps
        engine.step()
    start, t = engine.stats()["generated_tokens"], time.perf_counter()
    while engine.has_unfinished():
        engine.step()
    return (engine.stats()["generated_tokens"] - start) / (time.perf_counter() - t)


def context_state(model, context: int) -> tuple[list[int], SequenceState]:
    """A prompt of context + 1 tokens and a saved state covering the first `context` of them."""
    c = model.config
    ids = prompt(context + 1, c.vocab_size, salt=1)
    g = torch.Generator().manual_seed(context)
    width = c.kv_lora_rank + c.qk_rope_head_dim
    mla = {i: torch.randn(context, width, generator=g).to(model.compute_dtype) for i in c.mla_layers}
    H, D, P, Kc = c.kda_num_heads, c.kda_head_dim, c.kda_proj_dim, c.short_conv_kernel_size
    kda = {i: (torch.zeros(H, D, D), tuple(torch.zeros(Kc - 1, P, dtype=model.compute_dtype) for _ in range(3)))
           for i in c.kda_layers}
    return ids, SequenceState(ids[:context], [], kda, mla)


def bytes_per_token(model, context: int) -> tuple[int, int]:
    """(weight bytes read per decode token: trunk + the active experts; cache bytes read at `context`)."""
    c = model.config
    trunk, _, experts = weight_bytes(c, None)
    itemsize = torch.empty((), dtype=model.compute_dtype).element_size()
    spec = model.state_layout()
    cache = 2 * spec.slot_bytes(itemsize) + context * spec.token_bytes(itemsize)   # KDA read + written, MLA rows
    return trunk + expert_sizes(c, experts)[2], cache


def measure(name: str, path: Path, tokens: int, rounds: int) -> dict:
    """Every round runs each measurement once, in turn (bare, engine, each context, each batch size),
    so drift in the machine hits all of them; each rate is the best of its rounds."""
    model = k3.load(path, dtype=None)
    vocab = model.config.vocab_size
    cache = "3GiB"
    states = {c: context_state(model, c) for c in CONTEXTS}
    runs: dict[str, list[float]] = {}

    def record(key: str, rate: float) -> None:
        runs.setdefault(key, []).append(rate)

    for _ in range(rounds):
        record("bare", bare_rate(model, tokens))
        record("engine", engine_rate(LLM(model, max_num_seqs=1, cache_memory=cache), [prompt(PROMPT, vocab)], tokens))
        for context, (ids, state) in states.items():
            record(f"context {context}", engine_rate(LLM(model, max_num_seqs=1, cache_memory=cache), [ids], tokens,
                                                     [state]))
        for b in (1, 32):
            prompts = [prompt(PROMPT, vocab, salt=i) for i in range(b)]
            record(f"batch {b}", engine_rate(LLM(model, max_num_seqs=b, max_num_batched_tokens=2048,
                                                 cache_memory=cache), prompts, tokens))
    best = {k: max(v) for k, v in runs.items()}
    ctx = {c: best[f"context {c}"] for c in CONTEXTS}
    batch = {b: best[f"batch {b}"] for b in (1, 32)}
    weights, _ = bytes_per_token(model, 0)
    return {"checkpoint": name, "bare_tok_s": best["bare"], "engine_tok_s": best["engine"],
            "engine_over_bare": best["engine"] / best["bare"], "decode_tok_s_by_context": ctx,
            "context_8k_over_256": ctx[8192] / ctx[256], "context_16k_over_256": ctx[16384] / ctx[256],
            "bytes_allow_over_256": {c: sum(bytes_per_token(model, 256)) / sum(bytes_per_token(model, c)) for c in CONTEXTS},
            "decode_tok_s_by_batch": batch,
            "batch32_over_batch1": batch[32] / batch[1], "weight_bytes_per_token": weights,
            "cache_bytes_per_token": {c: bytes_per_token(model, c)[1] for c in CONTEXTS}, "runs": runs}


def report(r: dict) -> None:
    print(f"\n{r['checkpoint']}: weights read per token {r['weight_bytes_per_token'] / 1e6:,.1f} MB")
    print(f"{'measure':<34}{'value':>12}{'target':>10}")
    print(f"{'bare loop, batch 1 (tok/s)':<34}{r['bare_tok_s']:>12.1f}")
    print(f"{'engine, batch 1 (tok/s)':<34}{r['engine_tok_s']:>12.1f}")
    print(f"{'engine / bare':<34}{r['engine_over_bare']:>12.2f}{'>= 0.95':>10}")
    for c, rate in r["decode_tok_s_by_context"].items():
        mb = r["cache_bytes_per_token"][c] / 1e6
        print(f"{f'decode at {c:,} context (tok/s)':<34}{rate:>12.1f}   cache read {mb:,.1f} MB/token")
    for name, c, target in (("8K / 256", 8192, ">= 0.9"), ("16K / 256", 16384, ">= 0.85")):
        ratio = r["decode_tok_s_by_context"][c] / r["decode_tok_s_by_context"][256]
        print(f"{name:<34}{ratio:>12.2f}{target:>10}   the bytes allow {r['bytes_allow_over_256'][c]:.2f}")
    for b, rate in r["decode_tok_s_by_batch"].items():
        print(f"{f'decode batch {b} (tok/s)':<34}{rate:>12.1f}")
    print(f"{'batch 32 / batch 1':<34}{r['batch32_over_batch1']:>12.2f}{'>= 10':>10}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default=".bench")
    ap.add_argument("--decode-tokens", type=int, default=24)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", choices=["small", "compare"])
    args = ap.parse_args()
    torch.set_grad_enabled(False)
    results = []
    for name, cfg in (("small", mid()), ("compare", compare_config())):
        if args.only not in (None, name):
            continue
        path = Path(args.dir) / f"engine-{name}"
        if not (path / "config.json").exists():
            make_checkpoint(path, cfg, num_shards=4, with_vision=False)
        results.append(measure(name, path, args.decode_tokens, args.rounds))
        report(results[-1])
    print(json.dumps({"threads": torch.get_num_threads(), "results": results}))


if __name__ == "__main__":
    main()
