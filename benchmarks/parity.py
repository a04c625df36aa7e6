"""Parity figures: k3 vs mlx-lm's kimi_k3 (fp32, full forward and cached decode), k3 fp32 vs k3 fp64,
and chunked vs recurrent KDA, on random official-layout checkpoints.

    .venv/bin/python benchmarks/parity.py

Prints a table, then one JSON line.
"""

from __future__ import annotations

import json
import tempfile

import torch

import k3
from k3.config.presets import tiny, tiny7
from k3.ops.kda import chunk_kda, recurrent_kda
from k3.ops.norm import l2_norm
from k3.testing import make_checkpoint, rel_l2
from k3.testing.oracle import mlx_logits


def model_parity(name: str, config, tokens: int = 70) -> dict:
    d = make_checkpoint(tempfile.mkdtemp(), config, seed=11)
    ids = torch.randint(0, config.vocab_size, (2, tokens), generator=torch.Generator().manual_seed(5))
    m32, m64 = k3.load(d, dtype=torch.float32), k3.load(d, dtype=torch.float64)
    ours, exact = m32(ids), m64(ids)
    state = m32.new_state(2)
    cached = torch.cat([m32(ids[:, :tokens - 6], state)] + [m32(ids[:, t:t + 1], state)
                                                           for t in range(tokens - 6, tokens)], 1)
    mlx_full = mlx_logits(d, ids.numpy())
    mlx_dec = mlx_logits(d, ids.numpy(), decode_from=tokens - 6)
    return {"config": name, "k3_vs_mlx_full": rel_l2(ours, mlx_full), "k3_vs_mlx_decode": rel_l2(cached, mlx_dec),
            "k3_fp32_vs_fp64": rel_l2(ours, exact), "mlx_fp32_vs_k3_fp64": rel_l2(mlx_full, exact),
            "k3_cached_vs_full_fp32": rel_l2(cached, ours)}


def kda_parity() -> list[dict]:
    rows = []
    for dtype, T in ((torch.float64, 130), (torch.float32, 150), (torch.float32, 1024)):
        q, k = (l2_norm(torch.randn(1, T, 4, 32, dtype=torch.float64)) for _ in range(2))
        v = torch.randn(1, T, 4, 32, dtype=torch.float64)
        g = -5 * torch.sigmoid(torch.randn(1, T, 4, 32, dtype=torch.float64) + 2)
        beta = torch.sigmoid(torch.randn(1, T, 4, dtype=torch.float64))
        ref, _ = recurrent_kda(q, k, v, g, beta, 32 ** -0.5)
        out, _ = chunk_kda(*(t.to(dtype) for t in (q, k, v, g, beta)), 32 ** -0.5)
        rows.append({"dtype": str(dtype).removeprefix("torch."), "T": T, "chunk_vs_recurrent_fp64": rel_l2(out, ref)})
    return rows


def main() -> None:
    models = [model_parity("A-tiny (5 layers, block 2)", tiny()), model_parity("B-tiny7 (7 layers, block 3)", tiny7())]
    kda = kda_parity()
    print(f"{'config':<30}{'k3 vs mlx':>11}{'decode vs mlx':>15}{'k3 fp32 vs fp64':>17}{'mlx vs fp64':>13}")
    for r in models:
        print(f"{r['config']:<30}{r['k3_vs_mlx_full']:>11.1e}{r['k3_vs_mlx_decode']:>15.1e}"
              f"{r['k3_fp32_vs_fp64']:>17.1e}{r['mlx_fp32_vs_k3_fp64']:>13.1e}")
    for r in kda:
        print(f"chunked KDA ({r['dtype']}, T={r['T']}) vs fp64 recurrence: {r['chunk_vs_recurrent_fp64']:.1e}")
    print(json.dumps({"models": models, "kda": kda}))


if __name__ == "__main__":
    main()
