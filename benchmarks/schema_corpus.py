"""Structured outputs on the public schema corpus (k3.eval.schema_corpus), side by side in one run.

    .venv/bin/python benchmarks/schema_corpus.py [--xgrammar-python PATH] [--tokens 64]

1. acceptance per subset: k3; llguidance alone as the schema comes (no approximation); xgrammar (run
   with --xgrammar-python, an interpreter that has it: its Linux wheel pulls a CUDA torch, so it is not
   in k3's environment).
2. compile: k3's time to compile each accepted schema into a matcher over the default model's
   tokenizer (median and worst), and xgrammar's over the same vocabulary.
3. mask: llguidance's time per token to compute the allowed set and take the token, along outputs the
   default model writes for the corpus.
4. decode: the default model, greedy, batch 1: tokens/s without a constraint and with corpus schemas,
   alternating; the ratio is what a constraint costs per token after compile (the aim is at most 1.1x).

Prints a table, then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

import llguidance

from k3.defaults import default_model
from k3.engine import LLM, SamplingParams
from k3.engine.structured import StructuredOutputs
from k3.engine.structured.matcher import validate
from k3.eval.schema_corpus import corpus

XGRAMMAR_CHILD = r"""
import json, sys, time
import xgrammar as xgr
vocab, schemas = json.load(sys.stdin)
info = xgr.TokenizerInfo([bytes.fromhex(v) for v in vocab])
compiler = xgr.GrammarCompiler(info, cache_enabled=False)
out = []
for schema in schemas:
    t0 = time.perf_counter()
    try:
        compiler.compile_json_schema(json.dumps(schema), any_whitespace=False)
        out.append([True, time.perf_counter() - t0])
    except Exception as e:
        out.append([False, str(e)[:200]])
print(json.dumps(out))
"""


def library_alone(schema) -> bool:
    error, _ = llguidance.LLMatcher.validate_grammar_with_warnings(json.dumps({"grammars": [{"json_schema": schema}]}))
    return not error


def k3_accepts(schema) -> bool:
    try:
        validate(StructuredOutputs(json=schema))
        return True
    except ValueError:
        return False


def xgrammar(python: str | None, tokenizer, schemas: list) -> list | None:
    if not python:
        return None
    vocab = [tokenizer.token_bytes([i]).hex() for i in range(tokenizer.vocab_size)]
    r = subprocess.run([python, "-c", XGRAMMAR_CHILD], input=json.dumps([vocab, schemas]), capture_output=True,
                       text=True, timeout=3600)
    if r.returncode != 0:
        print(f"xgrammar run failed: {r.stderr[-500:]}", file=sys.stderr)
        return None
    return json.loads(r.stdout)


def compile_times(llm: LLM, schemas: list) -> list[float]:
    grammars = llm.engine._grammars()      # built on first use
    times = []
    for schema in schemas:
        t0 = time.perf_counter()
        grammars.compile(StructuredOutputs(json=schema))
        times.append(time.perf_counter() - t0)
    return times


def mask_and_decode(llm: LLM, schemas: list, tokens: int) -> dict:
    """Per-token mask time along the model's outputs, and decode tokens/s with and without the constraint."""
    grammars, mask = llm.engine._grammars(), []
    rates = {"free": [], "constrained": []}
    for schema in schemas:
        so = StructuredOutputs(json=schema)
        for kind in ("free", "constrained"):
            params = SamplingParams(max_tokens=tokens, temperature=0.0, ignore_eos=kind == "free",
                                    structured_outputs=so if kind == "constrained" else None)
            t0 = time.perf_counter()
            out = llm.generate(["Write the JSON:"], params)[0]
            rates[kind].append(len(out.token_ids) / (time.perf_counter() - t0))
        constraint = grammars.compile(so)
        for token in out.token_ids:
            t0 = time.perf_counter()
            constraint.allowed()
            if not constraint.accept(token):
                break
            mask.append(time.perf_counter() - t0)
    return {"mask_ms_median": 1e3 * statistics.median(mask), "mask_ms_p99": 1e3 * sorted(mask)[int(len(mask) * 0.99)],
            "free_tok_s": statistics.median(rates["free"]), "constrained_tok_s": statistics.median(rates["constrained"])}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--xgrammar-python", default=None)
    ap.add_argument("--tokens", type=int, default=64)
    args = ap.parse_args()
    subsets = corpus()
    llm = LLM(str(default_model()), cache_memory="64MiB")
    rows, accepted_all = {}, []
    for name, items in subsets.items():
        schemas = [s for _, s in items]
        ok = [k3_accepts(s) for s in schemas]
        accepted = [s for s, good in zip(schemas, ok) if good]
        accepted_all += accepted
        times = compile_times(llm, accepted)
        xg = xgrammar(args.xgrammar_python, llm.tokenizer, schemas)
        rows[name] = {"schemas": len(schemas), "k3": sum(ok), "llguidance_alone": sum(map(library_alone, schemas)),
                      "xgrammar": None if xg is None else sum(a for a, _ in xg),
                      "compile_ms_median": 1e3 * statistics.median(times), "compile_ms_max": 1e3 * max(times),
                      "xgrammar_compile_ms_median": None if xg is None else
                      1e3 * statistics.median([t for a, t in xg if a] or [0])}
    speed = mask_and_decode(llm, accepted_all[::12], args.tokens)
    print(f"{'subset':<12}{'schemas':>8}{'k3':>6}{'llg alone':>10}{'xgrammar':>9}{'compile ms (med/max)':>22}"
          f"{'xgr ms':>8}")
    for name, r in rows.items():
        xg = "-" if r["xgrammar"] is None else r["xgrammar"]
        xt = "-" if r["xgrammar_compile_ms_median"] is None else f"{r['xgrammar_compile_ms_median']:.1f}"
        print(f"{name:<12}{r['schemas']:>8}{r['k3']:>6}{r['llguidance_alone']:>10}{xg:>9}"
              f"{r['compile_ms_median']:>13.1f}/{r['compile_ms_max']:<8.0f}{xt:>8}")
    ratio = speed["free_tok_s"] / speed["constrained_tok_s"]
    print(f"mask {speed['mask_ms_median']:.3f} ms median, {speed['mask_ms_p99']:.3f} ms p99 per token; decode "
          f"{speed['free_tok_s']:.1f} tok/s free, {speed['constrained_tok_s']:.1f} constrained ({ratio:.2f}x per token)")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    total, took = sum(r["schemas"] for r in rows.values()), sum(r["k3"] for r in rows.values())
    print(json.dumps({"benchmark": "schema_corpus", "date": time.strftime("%Y-%m-%d"), "commit": commit,
                      "command": "benchmarks/schema_corpus.py " + " ".join(sys.argv[1:]), "subsets": rows,
                      "accepted": took, "schemas": total, "acceptance": took / total, **speed,
                      "cost_per_token": ratio}))


if __name__ == "__main__":
    main()
