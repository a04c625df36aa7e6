"""KDA decay gate: per head and key channel log-decay g in (lower_bound, 0) (K3) or (-inf, 0)."""

from __future__ import annotations

import torch

from k3.ops.elementwise import sigmoid, softplus


def kda_gate(raw: torch.Tensor, a_log: torch.Tensor, dt_bias: torch.Tensor, lower_bound: float | None) -> torch.Tensor:
    """raw [..., H, K] (= W_fb W_fa x); a_log [H] (already narrowed); dt_bias [H*K] -> g [..., H, K] fp32.

    K3 (lower_bound set): g = lb * sigmoid(exp(A_log[h]) * (raw + dt_bias)).
    Kimi-Linear (None):   g = -exp(A_log[h]) * softplus(raw + dt_bias).
    """
    H, K = raw.shape[-2:]
    cdt = torch.promote_types(raw.dtype, torch.float32)
    z = raw.to(cdt) + dt_bias.to(cdt).reshape(H, K)
    a = torch.exp(a_log.to(cdt)).reshape(H, 1)
    if lower_bound is not None:
        return lower_bound * sigmoid(a * z)
    return -a * softplus(z)
