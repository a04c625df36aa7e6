"""Load time, peak RSS, full-forward and decode throughput of a random mid-size K3 checkpoint; plus
the fast-vs-reference op pairs side by side (chunked vs recurrent KDA, packed vs dequantized MXFP4).

    .venv/bin/python benchmarks/forward.py [--preset mid] [--tokens 256] [--dir .bench/mid]

Prints a table, then one JSON line. Random weights: speed and memory only, no quality.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import torch

# Peak RSS is the probe's VmHWM (ru_maxrss carries a parent's RSS across fork + exec).
LOAD_PROBE = r"""
import json, re, sys, time, psutil, torch, k3
base = psutil.Process().memory_info().rss
t = time.perf_counter()
model = k3.load(sys.argv[1], dtype=None if sys.argv[2] == "none" else getattr(torch, sys.argv[2]))
load_s = time.perf_counter() - t
peak_load = int(re.search(r"VmHWM:\s+(\d+) kB", open("/proc/self/status").read()).group(1)) * 1024
weights = sum(x.numel() * x.element_size() for x in list(model.parameters()) + list(model.buffers()))
print(json.dumps({"load_s": load_s, "rss_base": base, "peak_rss_load": peak_load, "weights_bytes": weights}))
"""


def best_of(fn, repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def load_probe(path: Path, dtype: str) -> dict:
    out = subprocess.run([sys.executable, "-c", LOAD_PROBE, str(path), dtype], capture_output=True, text=True,
                         check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def model_throughput(path: Path, dtype, tokens: int) -> dict:
    import k3

    model = k3.load(path, dtype=dtype)
    ids = torch.randint(0, model.config.vocab_size, (1, tokens), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        model(ids[:, :16])
        prefill = best_of(lambda: model(ids))
        state = model.new_state()
        model(ids[:, :tokens // 2], state)
        steps = 16
        t = time.perf_counter()
        for i in range(steps):
            model(ids[:, tokens // 2 + i:tokens // 2 + i + 1], state)
        decode = (time.perf_counter() - t) / steps
    return {"prefill_tok_s": tokens / prefill, "decode_tok_s": 1 / decode}


def op_pairs() -> dict:
    from k3.ops.kda import chunk_kda, recurrent_kda
    from k3.ops.mxfp4 import mxfp4_linear, mxfp4_linear_reference
    from k3.ops.norm import l2_norm
    from k3.testing import rel_l2

    B, T, H, K = 1, 1024, 8, 64
    q, k = (l2_norm(torch.randn(B, T, H, K)) for _ in range(2))
    v, g = torch.randn(B, T, H, K), -5 * torch.sigmoid(torch.randn(B, T, H, K))
    beta = torch.sigmoid(torch.randn(B, T, H))
    o_c, _ = chunk_kda(q, k, v, g, beta, K ** -0.5)
    o_r, _ = recurrent_kda(q, k, v, g, beta, K ** -0.5)
    t_c = best_of(lambda: chunk_kda(q, k, v, g, beta, K ** -0.5))
    t_r = best_of(lambda: recurrent_kda(q, k, v, g, beta, K ** -0.5), 1)
    packed = torch.randint(0, 256, (3072, 1792), dtype=torch.uint8)
    scale = torch.randint(118, 130, (3072, 112), dtype=torch.uint8)
    x = torch.randn(16, 3584)
    t_p = best_of(lambda: mxfp4_linear(x, packed, scale))
    t_d = best_of(lambda: mxfp4_linear_reference(x, packed, scale))
    return {"kda_T": T, "kda_chunk_s": t_c, "kda_recurrent_s": t_r, "kda_chunk_speedup": t_r / t_c,
            "kda_chunk_vs_recurrent_rel_l2_fp32": rel_l2(o_c, o_r),
            "mxfp4_packed_s": t_p, "mxfp4_dequant_ref_s": t_d, "mxfp4_packed_speedup": t_d / t_p,
            "mxfp4_packed_vs_ref_rel_l2": rel_l2(mxfp4_linear(x, packed, scale), mxfp4_linear_reference(x, packed, scale))}


def main() -> None:
    from k3.config import PRESETS
    from k3.testing import make_checkpoint
    from k3.tools.inspect import summarize

    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="mid")
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--dir", default=".bench/mid")
    args = ap.parse_args()
    config = PRESETS[args.preset]()
    path = Path(args.dir)
    if not (path / "config.json").exists():
        make_checkpoint(path, config, num_shards=4)
    s = summarize(config, path)
    result = {"preset": args.preset, "params": s.params_total, "params_active": s.params_active_per_token,
              "bytes_on_disk": s.bytes_on_disk, "threads": torch.get_num_threads(), "tokens": args.tokens}
    for name, dtype in (("compact", "none"), ("fp32", "float32")):
        result[name] = load_probe(path, dtype) | model_throughput(path, None if dtype == "none" else torch.float32,
                                                                   args.tokens)
    result["ops"] = op_pairs()
    print_table(result)
    print(json.dumps(result))


def print_table(r: dict) -> None:
    print(f"preset {r['preset']}: {r['params']:,} params ({r['params_active']:,} active), "
          f"{r['bytes_on_disk'] / 1e6:.0f} MB on disk, {r['threads']} threads, {r['tokens']}-token prompt")
    print(f"{'dtype':<22}{'load s':>8}{'peak RSS/weights':>18}{'prefill tok/s':>15}{'decode tok/s':>14}")
    for name, label in (("compact", "None (bf16 kept, fp32)"), ("fp32", "float32")):
        m = r[name]
        ratio = (m["peak_rss_load"] - m["rss_base"]) / m["weights_bytes"]
        print(f"{label:<22}{m['load_s']:>8.2f}{ratio:>18.2f}{m['prefill_tok_s']:>15.1f}{m['decode_tok_s']:>14.1f}")
    o = r["ops"]
    print(f"KDA T={o['kda_T']}: chunked {o['kda_chunk_s'] * 1e3:.1f} ms vs recurrent {o['kda_recurrent_s'] * 1e3:.1f} ms "
          f"({o['kda_chunk_speedup']:.1f}x), rel-L2 {o['kda_chunk_vs_recurrent_rel_l2_fp32']:.1e}")
    print(f"MXFP4 16x3584 @ 3584x3072: packed {o['mxfp4_packed_s'] * 1e3:.1f} ms vs dequant+matmul "
          f"{o['mxfp4_dequant_ref_s'] * 1e3:.1f} ms ({o['mxfp4_packed_speedup']:.2f}x), rel-L2 {o['mxfp4_packed_vs_ref_rel_l2']:.1e}")


if __name__ == "__main__":
    main()
