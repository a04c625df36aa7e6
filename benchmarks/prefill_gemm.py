"""Who should multiply prefill-sized products: k3's blocked GEMM (gemm.cpp) or MKL's sgemm on the weight
widened (bf16) or decoded (MXFP4) to fp32 first; and what the opt-in `bf16-dot` (gemm_dot.cpp: x rounded
to bf16, the CPU's bf16 dot-product units) gains. `k3.ops.native.prefill_gemm()` picks by default; this
measures all three on the machine at hand, side by side in one process:

  prefill   compare.py's checkpoint, a 512-token prompt, the two choices alternating round by round
            (K3_PREFILL_GEMM set and re-read between calls); median tokens/s of each and their ratio
  products  each GEMM alone at the checkpoint's prefill shapes (the trunk's 512 rows, an expert's share
            of them) and at K3's expert shape, the widening or decoding inside the timed call as in the
            model; best of 5 per round

    .venv/bin/python benchmarks/prefill_gemm.py [--rounds 12] [--threads 2]

The choices' logits are compared first (relative L2, the tests' one helper): native and torch differ by fp32
summation order only; bf16-dot by x's rounding too. Prints two tables, then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

import k3
from k3.ops.mxfp4.linear import mxfp4_example_weight, mxfp4_linear_tiled
from k3.ops.native import bf16_dot_units, native, prefill_gemm
from k3.testing import make_checkpoint
from k3.testing.tolerance import rel_l2

sys.path.insert(0, str(Path(__file__).parent))
from compare import config as compare_config  # noqa: E402

CHOICES = ("native", "torch", "bf16-dot")
PROMPT = 512


def choose(choice: str) -> None:
    os.environ["K3_PREFILL_GEMM"] = choice
    prefill_gemm.cache_clear()


def seconds(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def whole_prefill(path: Path, rounds: int) -> dict:
    model = k3.load(path)
    ids = torch.tensor((np.arange(PROMPT) * 7919 % 30000).reshape(1, PROMPT))
    logits = {}
    for c in CHOICES:   # warm-up, and the two choices' logits side by side
        choose(c)
        logits[c] = model(ids, model.new_state(1), logits_to_keep=1)
    times = {c: [] for c in CHOICES}
    for r in range(rounds):
        for c in CHOICES if r % 2 == 0 else reversed(CHOICES):
            choose(c)
            times[c].append(seconds(lambda: model(ids, model.new_state(1), logits_to_keep=1)))
    run = {c: PROMPT / statistics.median(t) for c, t in times.items()}
    return {"tok_s": run, "native_over_torch": run["native"] / run["torch"],
            "bf16_dot_over_native": run["bf16-dot"] / run["native"],
            "per_round": [t / n for n, t in zip(times["native"], times["torch"])],
            "logits_rel_l2": rel_l2(logits["native"], logits["torch"]),
            "bf16_dot_logits_rel_l2": rel_l2(logits["bf16-dot"], logits["native"])}


def products(rounds: int) -> list[dict]:
    c, kernels = compare_config(), native()
    H, inter, latent = c.hidden_size, c.intermediate_size, c.routed_expert_hidden_size
    # The trunk's products at the prompt's rows; a routed expert's at its share of the prompt (512 x top-8
    # of 64 experts: 64 rows), and K3's own expert at its share of a 4096-token prompt (top-8 of 384: 85).
    shapes = [("bf16", PROMPT, H, H), ("bf16", PROMPT, inter, H), ("bf16", PROMPT, H, inter),
              ("mxfp4", PROMPT * c.num_experts_per_token // c.num_experts, c.moe_intermediate_size, latent),
              ("mxfp4", 4096 * 8 // 384, 3072, 3584)]
    rows = []
    for fmt, m, n, k in shapes:
        x = torch.randn(m, k)
        if fmt == "bf16":
            w = torch.randn(n, k).bfloat16()
            ways = {"native": lambda: kernels.bf16_gemm(x, w), "torch": lambda: F.linear(x, kernels.bf16_widen(w)),
                    "bf16-dot": lambda: kernels.bf16_dot_gemm(x, w)}
        else:
            p, s = mxfp4_example_weight(n, k, 1)
            ways = {"native": lambda: kernels.mxfp4_gemm(x, p, s), "torch": lambda: mxfp4_linear_tiled(x, p, s),
                    "bf16-dot": lambda: kernels.mxfp4_dot_gemm(x, p, s)}
        best = {way: min(min(seconds(fn) for _ in range(5)) for _ in range(rounds)) for way, fn in ways.items()}
        flops = 2 * m * n * k
        rows.append({"weights": fmt, "rows": m, "outputs": n, "depth": k,
                     **{f"{way}_gflop_s": flops / t / 1e9 for way, t in best.items()},
                     "native_over_torch": best["torch"] / best["native"],
                     "bf16_dot_over_native": best["native"] / best["bf16-dot"]})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    if native() is None:
        sys.exit("prefill_gemm.py compares k3's native GEMM with torch's: the native kernels did not load")
    torch.set_num_threads(args.threads)
    default = prefill_gemm()
    with torch.inference_mode(), tempfile.TemporaryDirectory(prefix="k3-prefill-gemm-") as work:
        path = make_checkpoint(Path(work), compare_config(), num_shards=4, with_vision=False, tokenizer=True)
        prefill = whole_prefill(path, args.rounds)
        rows = products(max(1, args.rounds // 4))
    result = {"bench": "prefill_gemm", "threads": args.threads, "default": default, "bf16_dot_units": bf16_dot_units(),
              "prefill": prefill, "products": rows}
    show(result)
    print(json.dumps(result))


def show(r: dict) -> None:
    p = r["prefill"]
    print(f"prefill at {PROMPT} tokens (tok/s, median): native {p['tok_s']['native']:.1f}, torch "
          f"{p['tok_s']['torch']:.1f}, native/torch {p['native_over_torch']:.2f} (rounds "
          f"{min(p['per_round']):.2f}-{max(p['per_round']):.2f}); logits differ by {p['logits_rel_l2']:.1e} (relative L2)")
    print(f"bf16-dot (x rounded to bf16; dot-product units here: {r['bf16_dot_units']}): {p['tok_s']['bf16-dot']:.1f} tok/s, "
          f"{p['bf16_dot_over_native']:.2f}x native; logits {p['bf16_dot_logits_rel_l2']:.1e} from native (relative L2)")
    print(f"default here: {r['default']}")
    print(f"{'weights':<8}{'M':>6}{'N':>7}{'K':>7}{'native GFLOP/s':>16}{'torch GFLOP/s':>15}{'native/torch':>14}"
          f"{'bf16-dot GFLOP/s':>18}{'dot/native':>12}")
    for x in r["products"]:
        print(f"{x['weights']:<8}{x['rows']:>6}{x['outputs']:>7}{x['depth']:>7}{x['native_gflop_s']:>16.0f}"
              f"{x['torch_gflop_s']:>15.0f}{x['native_over_torch']:>14.2f}{x['bf16-dot_gflop_s']:>18.0f}"
              f"{x['bf16_dot_over_native']:>12.2f}")


if __name__ == "__main__":
    main()
