"""Engine throughput on a random mid-size K3 checkpoint (hidden 1024, 8 layers, 32 experts top-4):
decode tokens/s at batch 1, 8 and 32, prefill tokens/s for a 512-token prompt, and cached decode vs
the no-cache baseline (recompute the whole sequence for every token) at 512 tokens of context.

    .venv/bin/python benchmarks/engine.py [--dtype float32|none] [--decode-tokens 16]

Prints a table, then one JSON line. Random weights: speed only.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

import k3
from k3.config.presets import mid
from k3.engine import LLM, SamplingParams
from k3.testing import make_checkpoint


def prompts(n: int, length: int, vocab: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(n * 1000 + length)
    return torch.randint(0, vocab, (n, length), generator=g).tolist()


def decode_rate(llm: LLM, batch: int, tokens: int, vocab: int) -> float:
    """Generated tokens per second once every request has its first token (prefill excluded)."""
    engine = llm.engine
    params = SamplingParams(max_tokens=tokens + 1, temperature=0.0, ignore_eos=True)
    for p in prompts(batch, 32, vocab):
        engine.add_request(p, params)
    while engine.stats()["generated_tokens"] < batch:
        engine.step()
    start_tokens, t = engine.stats()["generated_tokens"], time.perf_counter()
    while engine.has_unfinished():
        engine.step()
    return (engine.stats()["generated_tokens"] - start_tokens) / (time.perf_counter() - t)


def prefill_rate(llm: LLM, length: int, vocab: int) -> tuple[float, float]:
    """(prefill tokens/s for one prompt, cached decode s/token at that context)."""
    engine = llm.engine
    engine.add_request(prompts(1, length, vocab)[0], SamplingParams(max_tokens=9, temperature=0.0, ignore_eos=True))
    t = time.perf_counter()
    engine.step()
    prefill = time.perf_counter() - t
    t = time.perf_counter()
    while engine.has_unfinished():
        engine.step()
    return length / prefill, (time.perf_counter() - t) / 8


def no_cache_rate(model, length: int, vocab: int, tokens: int = 4) -> float:
    """s/token when every new token recomputes the full forward over the whole sequence."""
    ids = prompts(1, length, vocab)[0]
    t = time.perf_counter()
    with torch.inference_mode():
        for _ in range(tokens):
            ids.append(int(model(torch.tensor([ids]))[0, -1].argmax()))
    return (time.perf_counter() - t) / tokens


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default=".bench/mid")
    ap.add_argument("--dtype", default="float32", choices=["float32", "none"])
    ap.add_argument("--decode-tokens", type=int, default=16)
    args = ap.parse_args()
    path = Path(args.dir)
    if not (path / "config.json").exists():
        make_checkpoint(path, mid(), num_shards=4)
    model = k3.load(path, dtype=None if args.dtype == "none" else torch.float32)
    vocab = model.config.vocab_size

    def fresh(**kw) -> LLM:
        return LLM(model, cache_memory="2GiB", **kw)

    result = {"preset": "mid", "dtype": args.dtype, "threads": torch.get_num_threads(), "decode": {}}
    decode_rate(fresh(max_num_seqs=1), 1, 2, vocab)   # warm-up
    for batch in (1, 8, 32):
        result["decode"][batch] = decode_rate(fresh(max_num_seqs=batch, max_num_batched_tokens=2048), batch,
                                              args.decode_tokens, vocab)
    prefill, cached = prefill_rate(fresh(max_num_batched_tokens=512), 512, vocab)
    baseline = no_cache_rate(model, 512, vocab)
    result |= {"prefill_tok_s_512": prefill, "cached_decode_s_at_512": cached, "no_cache_s_at_512": baseline,
               "cached_speedup_at_512": baseline / cached}
    print(f"mid preset, dtype {args.dtype}, {result['threads']} threads")
    print(f"{'decode batch':<14}{'tokens/s':>10}")
    for batch, rate in result["decode"].items():
        print(f"{batch:<14}{rate:>10.1f}")
    print(f"prefill 512 tokens: {prefill:.1f} tokens/s")
    print(f"at 512 tokens of context: cached decode {cached * 1e3:.1f} ms/token, no-cache recompute "
          f"{baseline * 1e3:.1f} ms/token ({result['cached_speedup_at_512']:.1f}x)")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
