"""Normalisations, following the official precision contract (spec §4.0)."""

from __future__ import annotations

import torch

from k3.ops.dispatch import register
from k3.ops.elementwise import sigmoid
from k3.ops.harness import Example, randn
from k3.ops.native import MAX_ROWS, native


def rms_norm_reference(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x [..., D], weight [D]. Normalise in fp32, cast back to x.dtype, then scale (KimiRMSNorm)."""
    xf = x.to(torch.promote_types(x.dtype, torch.float32))
    y = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
    return y * weight.to(x.dtype)


def _rms_norm_native(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    flat = x.reshape(-1, x.shape[-1]).contiguous()
    return native().rms_norm_rows(flat, weight.contiguous(), eps).view(x.shape)


def _rms_norm_examples(large: bool) -> list[Example]:
    D = 7168 if large else 37
    return [Example(f"{n} rows x {D}, {w.dtype}", (randn(n, D, seed=1), w, 1e-6))
            for n in (1, 5) for w in (randn(D, seed=2), randn(D, seed=3, dtype=torch.bfloat16))]


def _gated_rms_norm_examples(large: bool) -> list[Example]:
    H, D = (96, 128) if large else (3, 19)
    return [Example(f"{n} tokens x {H} heads x {D}", (randn(n, H, D, seed=1), randn(n, H, D, seed=2), randn(D, seed=3), 1e-6))
            for n in (1, 4)]


def rms_norm_takes(weight: torch.Tensor) -> bool:
    """Whether the native RMSNorm reads this weight (decode rows given): for callers with no rows yet."""
    return weight.dtype in (torch.float32, torch.bfloat16)


# Decode rows (fp32, at most MAX_ROWS): one native call for the reference's eight small ops.
rms_norm = register("rms_norm", examples=_rms_norm_examples, reference=rms_norm_reference, native=_rms_norm_native,
                    supports=lambda x, weight, eps: (x.dtype == torch.float32 and rms_norm_takes(weight)
                                                     and x.dim() >= 1 and x.shape[:-1].numel() <= MAX_ROWS))


def l2_norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """x [..., D] -> x / sqrt(sum(x^2) + eps), in fp32 or wider (fla l2norm: eps inside the root)."""
    xf = x.to(torch.promote_types(x.dtype, torch.float32))
    return xf * torch.rsqrt(xf.pow(2).sum(-1, keepdim=True) + eps)


def gated_rms_norm_reference(o: torch.Tensor, gate: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """o, gate [..., D]; weight [D]. RMSNorm(o) * weight * sigmoid(gate) in fp32, returned in gate.dtype."""
    of = o.to(torch.promote_types(o.dtype, torch.float32))
    y = of * torch.rsqrt(of.pow(2).mean(-1, keepdim=True) + eps) * weight.to(of.dtype)
    return (y * sigmoid(gate.to(of.dtype))).to(gate.dtype)


def _gated_rms_norm_native(o, gate, weight, eps):
    D = o.shape[-1]
    return native().gated_rms_norm_rows(o.reshape(-1, D).contiguous(), gate.reshape(-1, D).contiguous(),
                                        weight.contiguous(), eps).view(gate.shape)


# KDA's output norm on decode rows (fp32, at most MAX_ROWS tokens of any number of heads): one call.
gated_rms_norm = register(
    "gated_rms_norm", examples=_gated_rms_norm_examples, reference=gated_rms_norm_reference, native=_gated_rms_norm_native,
    supports=lambda o, gate, weight, eps: (o.dtype == gate.dtype == weight.dtype == torch.float32 and o.shape == gate.shape
                                           and o.dim() >= 2 and o.shape[:-2].numel() <= MAX_ROWS))
