"""KDA's one-token decode step as one native call: short convs with SiLU, L2 norms and the gated delta
rule for every head (reference: `short_conv_silu` + `l2_norm` + `recurrent_kda`, which it must equal
up to fp32 rounding; tests/ops/test_native.py compares them)."""

from __future__ import annotations

import torch

from k3.ops.native import cpu_inference, native


def use_native_kda_step(*tensors: torch.Tensor) -> bool:
    """CPU fp32 tensors outside autograd (training keeps the differentiable reference)."""
    return all(t.dtype == torch.float32 for t in tensors) and cpu_inference(*tensors)


def native_kda_step(q, k, v, g, beta, tails, initial, conv_weights, scale: float):
    """q, k, v [b, 1, P] (projected, before the convs); g [b, 1, H, K]; beta [b, 1, H]; tails (q, k, v)
    each [b, Kc-1, P] or None (zeros); initial [b, H, K, V] or None (zeros); conv_weights 3 x [P, Kc].

    -> (o [b, 1, H, V] fp32, final state [b, H, K, V], new tails) -- what `KimiDeltaAttention._core`
    returns. Nothing passed in is written.
    """
    b, _, H, K = g.shape
    V = v.shape[-1] // H
    if initial is None:
        initial = q.new_zeros((b, H, K, V))
    if tails is None:
        tails = tuple(x.new_zeros((b, w.shape[1] - 1, x.shape[-1])) for x, w in zip((q, k, v), conv_weights))
    o, final, tq, tk, tv = native().kda_decode(
        *(x.reshape(b, -1).contiguous() for x in (q, k, v)), *(w.contiguous() for w in conv_weights),
        *(t.to(torch.float32).contiguous() for t in tails), g.reshape(b, H, K).contiguous(),
        beta.reshape(b, H).contiguous(), initial.to(torch.float32).contiguous(), scale)
    return o.unsqueeze(1), final, (tq.to(q.dtype), tk.to(q.dtype), tv.to(q.dtype))
