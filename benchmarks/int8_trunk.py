"""The int8 trunk (issue 25): what it costs in accuracy, and what its decode GEMV gains in speed.

Quality: `k3.load(ckpt, trunk="int8")` (every int8_target matrix quantised at load, per-32 bf16 scales)
against `k3.load(ckpt)` (the bf16 weights, fp32 compute) on held-out text (the README and the docs' guides, never trained
on; seeded random ids for a checkpoint without a tokenizer, such as a random-weight slice from
`k3 synth`). Two paths: a prefill (many rows: dequantised matrices and fp32 GEMMs, so the weights'
rounding alone) and teacher-forced decode steps (one row: the native int8 GEMV, which also rounds
activations to int16 per 32). Relative L2 (the one tolerance helper), top-1 agreement and mean
KL(bf16 || int8) per token.

Speed: the decode matrices of one released KDA+MoE layer and one MLA+MoE layer, shaped as the model
multiplies them (fused groups), at batch 1: k3's bf16 GEMV against its int8 GEMV, and the int8 time
against its floor (its bytes / the read bandwidth measured in the same run, as benchmarks/compare.py
measures it). Random weights: the kernels' speed does not depend on the values.

    .venv/bin/python benchmarks/int8_trunk.py [CHECKPOINT] [--tokens 1024] [--decode 32] [--no-speed]
    .venv/bin/python benchmarks/int8_trunk.py slice/ --tokens 128   # k3 synth slice/ --preset k3 --layers 2

Prints tables, then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

import k3
from k3.chat.tokenizer import K3Tokenizer
from k3.defaults import default_model
from k3.testing.tolerance import rel_l2

ROOT = Path(__file__).resolve().parents[1]
# Held-out English (never trained on): the README and the docs' guides, in a fixed order.
TEXTS = [ROOT / "README.md", *sorted((ROOT / "docs" / "guide").glob("*.md"))]
sys.path.insert(0, str(Path(__file__).resolve().parent))


def input_ids(checkpoint: Path, vocab: int, n: int) -> tuple[torch.Tensor, str]:
    if (checkpoint / "tiktoken.model").is_file():
        return torch.tensor([K3Tokenizer.load(checkpoint).encode("\n".join(p.read_text() for p in TEXTS))[:n]]), "README and guide text"
    return torch.randint(0, vocab, (1, n), generator=torch.Generator().manual_seed(0)), "random ids"


def compare(got: torch.Tensor, ref: torch.Tensor) -> dict:
    lp, lq = torch.log_softmax(ref.float(), -1), torch.log_softmax(got.float(), -1)
    return {"rel_l2": rel_l2(got, ref), "top1": float((got.argmax(-1) == ref.argmax(-1)).float().mean()),
            "kl_mean": float((lp.exp() * (lp - lq)).sum(-1).mean())}


def decode_logits(model, ids: torch.Tensor, steps: int) -> torch.Tensor:
    """Teacher-forced: the first half of ids as a prompt, then `steps` tokens one at a time."""
    state = model.new_state(1)
    start = ids.shape[1] - steps
    model(ids[:, :start], state)
    return torch.cat([model(ids[:, t:t + 1], state)[0] for t in range(start, ids.shape[1])])


def quality(checkpoint: str, tokens: int, steps: int) -> dict:
    bf16, int8 = k3.load(checkpoint), k3.load(checkpoint, trunk="int8")
    ids, source = input_ids(Path(checkpoint), bf16.config.vocab_size, tokens)
    out = {"checkpoint": checkpoint, "input": source, "tokens": ids.shape[1], "decode_steps": steps,
           "int8_matrices": sum(1 for m in int8.modules() if getattr(m, "weight_scale", None) is not None)}
    with torch.inference_mode():
        out["prefill"] = compare(int8(ids)[0], bf16(ids)[0])
        out["decode"] = compare(decode_logits(int8, ids, steps), decode_logits(bf16, ids, steps))
    return out


def layer_matrices(layer: int) -> list[tuple[int, int]]:
    """[out, in] of each product a decode step of released layer `layer` makes with int8-able weights."""
    from k3.checkpoint.layout import expected_tensors, int8_target
    from k3.config.presets import released
    from k3.layers.fused import fuse_inputs
    from k3.model.k3 import K3ForCausalLM

    c = released()
    with torch.device("meta"):
        model = K3ForCausalLM(c, torch.float32)
    fuse_inputs(model)
    prefix = f"model.layers.{layer}."
    targets = {s.name for s in expected_tensors(c) if s.name.startswith(prefix) and int8_target(s)}
    names = {id(m): n for n, m in model.named_modules()}
    shapes, grouped = [], set()
    for module in model.get_submodule(prefix[:-1]).modules():
        for group in getattr(module, "fused", {}).values():
            members = [names[id(lin)] + ".weight" for lin in group.linears]
            if all(m in targets for m in members):
                shapes.append((sum(group.sizes), group.linears[0].weight.shape[1]))
                grouped.update(members)
    for name in sorted(targets - grouped):
        shapes.append(tuple(model.get_parameter(name).shape))
    return shapes


def best_time(fn, repeats: int = 7) -> float:
    fn()
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def speed() -> dict:
    from compare import bandwidth

    from k3.config.presets import released
    from k3.ops.int8 import quantize
    from k3.ops.native import native

    kernels, c = native(), released()
    bw = bandwidth()
    rows = {}
    for kind in ("kda", "mla"):
        layer = next(i for i in c.moe_layers if c.layer_types[i] == kind)
        total = {"bf16_s": 0.0, "int8_s": 0.0, "bf16_bytes": 0, "int8_bytes": 0}
        for out, inp in layer_matrices(layer):
            w = (torch.randn(out, inp) * 0.02).bfloat16()
            q, s = quantize(w)
            x = torch.randn(1, inp)
            total["bf16_s"] += best_time(lambda: kernels.bf16_linear(x, w))
            total["int8_s"] += best_time(lambda: kernels.int8_linear(x, q, s))
            total["bf16_bytes"] += w.numel() * 2
            total["int8_bytes"] += q.numel() + s.numel() * 2
        total["int8_floor_s"] = total["int8_bytes"] / bw
        rows[f"{kind} layer {layer}"] = total
    return {"bandwidth_bytes_s": bw, "layers": rows}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("checkpoint", nargs="?", default=str(default_model()))
    ap.add_argument("--tokens", type=int, default=1024)
    ap.add_argument("--decode", type=int, default=32, help="teacher-forced decode steps compared")
    ap.add_argument("--no-speed", action="store_true", help="skip the GEMV timing at the released shapes")
    args = ap.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    out = {"quality": quality(args.checkpoint, args.tokens, args.decode)}
    q = out["quality"]
    print(f"{q['checkpoint']}: {q['int8_matrices']} int8 matrices, {q['tokens']} tokens of {q['input']}")
    print(f"{'path':<28}{'rel L2':>10}{'top-1':>9}{'KL':>11}")
    for path, label in (("prefill", "prefill (dequantised GEMM)"), ("decode", "decode (int8 GEMV)")):
        r = q[path]
        print(f"{label:<28}{r['rel_l2']:>10.2e}{r['top1']:>9.4f}{r['kl_mean']:>11.2e}")
    if not args.no_speed:
        out["speed"] = sp = speed()
        print(f"\nGEMV at the released shapes, batch 1, read bandwidth {sp['bandwidth_bytes_s'] / 1e9:.1f} GB/s")
        print(f"{'layer':<16}{'bf16 ms':>9}{'int8 ms':>9}{'speedup':>9}{'int8 floor ms':>15}{'int8/floor':>12}")
        for name, r in sp["layers"].items():
            print(f"{name:<16}{r['bf16_s'] * 1e3:>9.2f}{r['int8_s'] * 1e3:>9.2f}{r['bf16_s'] / r['int8_s']:>8.2f}x"
                  f"{r['int8_floor_s'] * 1e3:>15.2f}{r['int8_s'] / r['int8_floor_s']:>11.2f}x")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
