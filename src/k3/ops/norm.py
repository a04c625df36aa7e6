"""Normalisations, following the official precision contract (spec section 4.0)."""

from __future__ import annotations

import torch

from k3.ops.elementwise import sigmoid


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x [..., D], weight [D]. Normalise in fp32, cast back to x.dtype, then scale (KimiRMSNorm)."""
    xf = x.to(torch.promote_types(x.dtype, torch.float32))
    y = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
    return y * weight.to(x.dtype)


def l2_norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """x [..., D] -> x / sqrt(sum(x^2) + eps), in fp32 or wider (fla l2norm: eps inside the root)."""
    xf = x.to(torch.promote_types(x.dtype, torch.float32))
    return xf * torch.rsqrt(xf.pow(2).sum(-1, keepdim=True) + eps)


def gated_rms_norm(o: torch.Tensor, gate: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """o, gate [..., D]; weight [D]. RMSNorm(o) * weight * sigmoid(gate) in fp32, returned in gate.dtype."""
    of = o.to(torch.promote_types(o.dtype, torch.float32))
    y = of * torch.rsqrt(of.pow(2).mean(-1, keepdim=True) + eps) * weight.to(of.dtype)
    return (y * sigmoid(gate.to(of.dtype))).to(gate.dtype)
