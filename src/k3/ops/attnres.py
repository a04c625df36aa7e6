"""Block Attention Residuals: a softmax over depth that mixes banked block sums with the current one."""

from __future__ import annotations

import torch

from k3.ops.dispatch import register
from k3.ops.native import MAX_ROWS, native
from k3.ops.precision import wide


def attn_res_query(norm_weight: torch.Tensor, proj_weight: torch.Tensor) -> torch.Tensor:
    """The pseudo-query w = norm ⊙ proj, formed in fp32 or wider ([D] and [1, D] -> [D])."""
    return wide(norm_weight) * wide(proj_weight).reshape(-1)


def attn_res_mix_reference(candidates: list[torch.Tensor], query: torch.Tensor, eps: float) -> torch.Tensor:
    """candidates: m+1 tensors [..., D] (bank, then current); query [D] fp32 -> [..., D].

    score_j = (RMS-normalised V_j) · query; alpha = softmax_j(score); returns sum_j alpha_j V_j of the
    RAW candidates. All in fp32 (or wider), cast to the candidates' dtype.
    """
    dtype = candidates[-1].dtype
    cdt = torch.promote_types(dtype, torch.float32)
    v = torch.stack([c.to(cdt) for c in candidates])
    inv_rms = torch.rsqrt(v.pow(2).mean(-1) + eps)
    scores = (v @ query.to(cdt)) * inv_rms
    alpha = torch.softmax(scores, dim=0)
    return (alpha.unsqueeze(-1) * v).sum(0).to(dtype)


def _attn_res_mix_native(candidates: list[torch.Tensor], query: torch.Tensor, eps: float) -> torch.Tensor:
    """Decode: one pass per candidate instead of a stack and eight passes."""
    rows = [c.reshape(-1, c.shape[-1]).contiguous() for c in candidates]
    return native().attn_res_mix(rows, query.contiguous(), eps).reshape(candidates[-1].shape)


def _supports(candidates: list[torch.Tensor], query: torch.Tensor, eps: float) -> bool:
    c = candidates[-1]
    return (query.dtype == torch.float32 and c.numel() // max(1, c.shape[-1]) <= MAX_ROWS
            and all(x.dtype == torch.float32 and x.shape == c.shape for x in candidates))


attn_res_mix = register("attn_res_mix", reference=attn_res_mix_reference, native=_attn_res_mix_native,
                        supports=_supports)
