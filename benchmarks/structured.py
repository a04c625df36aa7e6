"""Structured outputs: the cost of grammar-constrained decoding, side by side in one run.

    .venv/bin/python benchmarks/structured.py [--tokens 96] [--rounds 2]

1. decode: compare.py's checkpoint (random weights in K3's proportions, a 32,000-token test vocabulary),
   greedy at batch 1 after a 64-token prompt, without a constraint and with a JSON schema (an array of
   strings, which a random model keeps filling): tokens/s, alternating, best of --rounds. And the
   constrained run again with drafts (k=4) that replay its own output (what prompt lookup proposes when
   the output copies text it can see), each draft checked against the mask at every window position:
   the output must not change, and the ratio to the constrained run without drafts is what drafting buys
   under a constraint.
2. mask: llguidance's time per token to compute the allowed set and take the token, along a constrained
   output, at 32,000 tokens and at K3's 163,840 (a byte-level test vocabulary padded to that size:
   no released tokenizer is available here).
3. compile: time to build llguidance's tokenizer (once per engine) and to compile schemas (per request).

Prints a table, then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from compare import config as compare_config  # noqa: E402
from scratch import scratch_dir  # noqa: E402
from speculative import ReplayProposer  # noqa: E402

import k3  # noqa: E402
from k3.chat.tokenizer import K3Tokenizer  # noqa: E402
from k3.engine import LLM, SamplingParams  # noqa: E402
from k3.engine.speculative import Drafter  # noqa: E402
from k3.engine.structured import StructuredOutputs  # noqa: E402
from k3.engine.structured.matcher import Grammars  # noqa: E402
from k3.testing import make_checkpoint  # noqa: E402
from k3.testing.tokenizer import ranks_for_vocab, write_tokenizer  # noqa: E402

ARRAY = {"type": "array", "items": {"type": "string"}}
SCHEMAS = {
    "flat object": {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
                    "required": ["name", "age"]},
    "nested 4 deep": {"type": "object", "properties": {"a": {"type": "object", "properties": {"b": {
        "type": "object", "properties": {"c": {"type": "object", "properties": {"d": {"type": "integer"}}}}}}}}},
    "enum of 500": {"enum": [f"value-{i}" for i in range(500)]},
    "array of objects": {"type": "array", "items": {"type": "object", "properties": {
        "id": {"type": "integer", "minimum": 0}, "tags": {"type": "array", "items": {"type": "string"}}}}},
}


def decode_rate(llm: LLM, prompt, n: int, so) -> tuple[float, list[int]]:
    engine = llm.engine
    rid = engine.add_request(prompt, SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=so is None,
                                                    structured_outputs=so))
    start = None
    done = None
    while engine.has_unfinished():
        for o in engine.step():
            if o.finished:
                done = o
        req = engine.requests.get(rid)
        if start is None and req is not None and req.output_ids:
            start = (time.perf_counter(), len(req.output_ids))
    return (len(done.token_ids) - start[1]) / (time.perf_counter() - start[0]), done.token_ids


def drafted(path, prompt, output) -> LLM:
    """An LLM whose drafter replays `output` after `prompt` (every draft right unless the mask cuts it)."""
    llm = LLM(k3.load(str(path)), tokenizer=str(path), cache_memory="1GiB", enable_prefix_caching=False,
              speculative_config={"method": "ngram", "num_speculative_tokens": 4})
    llm.engine.drafter = Drafter(llm.engine.drafter.config, ReplayProposer([prompt + output]))
    return llm


def decode_part(args) -> dict:
    c = compare_config().replace(eos_token_id=32000 - 254)   # <|end_of_msg|> of the test vocabulary
    path = make_checkpoint(scratch_dir("k3-structured-"), c, num_shards=4, with_vision=False,
                           tokenizer=True)
    llm = LLM(k3.load(str(path)), tokenizer=str(path), cache_memory="1GiB", enable_prefix_caching=False)
    prompt = torch.randint(0, 30000, (64,), generator=torch.Generator().manual_seed(0)).tolist()
    runs = {"plain": [], "json schema": [], "json schema, drafts k=4": []}
    spec = None
    for _ in range(args.rounds):
        runs["plain"].append(decode_rate(llm, prompt, args.tokens, None)[0])
        rate, ref = decode_rate(llm, prompt, args.tokens, StructuredOutputs(json=ARRAY))
        runs["json schema"].append(rate)
        spec = spec or drafted(path, prompt, ref)
        rate, out = decode_rate(spec, prompt, args.tokens, StructuredOutputs(json=ARRAY))
        assert out == ref, "drafts changed the constrained greedy output"
        runs["json schema, drafts k=4"].append(rate)
    best = {k: max(v) for k, v in runs.items()}
    stats = {k: v for k, v in spec.engine.stats().items() if k.startswith("spec_")}
    return {"tokens_per_s": best, "runs": runs, "constrained_over_plain": best["json schema"] / best["plain"],
            "drafted_over_constrained": best["json schema, drafts k=4"] / best["json schema"], "spec": stats}


def mask_part(vocab: int) -> dict:
    d = scratch_dir("k3-vocab-")
    write_tokenizer(d, ranks_for_vocab(vocab))
    tok = K3Tokenizer.load(d)
    t0 = time.perf_counter()
    grammars = Grammars(tok, vocab, tok.encoding._special_tokens["<|end_of_msg|>"])
    grammars.lltokenizer
    build = time.perf_counter() - t0
    # Walk a constrained output: at each step the allowed set, then a token from it (the first allowed
    # after a pseudo-random start, so strings and numbers both get written).
    c = grammars.compile(StructuredOutputs(json=SCHEMAS["array of objects"]))
    times = []
    g = torch.Generator().manual_seed(1)
    for _ in range(200):
        t0 = time.perf_counter()
        allowed = c.allowed()
        ids = allowed.nonzero().flatten()
        token = int(ids[torch.randint(0, ids.numel(), (1,), generator=g)])
        c.accept(token)
        times.append(time.perf_counter() - t0)
        if c.done:
            break
    times.sort()
    compile_ms = {}
    for name, schema in SCHEMAS.items():
        t0 = time.perf_counter()
        grammars.compile(StructuredOutputs(json=schema))
        compile_ms[name] = (time.perf_counter() - t0) * 1e3
    return {"vocab": vocab, "tokenizer_build_s": build, "mask_ms_p50": times[len(times) // 2] * 1e3,
            "mask_ms_p90": times[int(len(times) * 0.9)] * 1e3, "steps": len(times), "compile_ms": compile_ms}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=96)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    torch.set_grad_enabled(False)
    result = {"decode": decode_part(args), "mask": [mask_part(32000), mask_part(163840)]}
    d = result["decode"]
    print(f"decode (compare.py's checkpoint): plain {d['tokens_per_s']['plain']:.2f} tok/s, JSON schema "
          f"{d['tokens_per_s']['json schema']:.2f} tok/s = {d['constrained_over_plain']:.3f}x; with drafts "
          f"{d['tokens_per_s']['json schema, drafts k=4']:.2f} tok/s = {d['drafted_over_constrained']:.2f}x "
          f"the constrained run ({d['spec']})")
    for m in result["mask"]:
        print(f"vocab {m['vocab']:>7,}: llguidance tokenizer {m['tokenizer_build_s']:.2f} s once; mask + take "
              f"p50 {m['mask_ms_p50']:.3f} ms, p90 {m['mask_ms_p90']:.3f} ms per token; compile "
              + ", ".join(f"{k} {v:.1f} ms" for k, v in m["compile_ms"].items()))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
