"""Block Attention Residuals: a softmax over depth that mixes banked block sums with the current one."""

from __future__ import annotations

import torch

from k3.ops.dispatch import register
from k3.ops.harness import Example, randn
from k3.ops.native import native
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
    """One pass per candidate instead of a stack and eight passes (a 512-token prefill spent about 0.13 s
    in those), rows split over threads when there are many."""
    rows = [c.reshape(-1, c.shape[-1]).contiguous() for c in candidates]
    return native().attn_res_mix(rows, query.contiguous(), eps).reshape(candidates[-1].shape)


def _fp32_alike(candidates: list[torch.Tensor]) -> bool:
    c = candidates[-1]
    return all(x.dtype == torch.float32 and x.shape == c.shape for x in candidates)


def _mix_examples(large: bool) -> list[Example]:
    D = 7168 if large else 29
    return [Example(f"{m} candidates of {n} x {D}", ([randn(n, D, seed=i) for i in range(m)], randn(D, seed=99), 1e-6))
            for n, m in ((1, 3), (4, 7))]


def _attn_res_examples(large: bool) -> list[Example]:
    D = 7168 if large else 29
    return [Example(f"{m} candidates of {n} x {D}",
                    ([randn(n, D, seed=i) for i in range(m)], randn(D, seed=98), randn(1, D, seed=99), 1e-6))
            for n, m in ((1, 3), (4, 7))]


attn_res_mix = register("attn_res_mix", examples=_mix_examples, reference=attn_res_mix_reference, native=_attn_res_mix_native,
                        supports=lambda candidates, query, eps: query.dtype == torch.float32 and _fp32_alike(candidates))


def attn_res_reference(candidates: list[torch.Tensor], norm_weight: torch.Tensor, proj_weight: torch.Tensor,
                       eps: float) -> torch.Tensor:
    """attn_res_mix with the pseudo-query of a layer's two weights (norm [D], proj [1, D])."""
    return attn_res_mix(candidates, attn_res_query(norm_weight, proj_weight), eps)


def _attn_res_native(candidates, norm_weight, proj_weight, eps):
    rows = [c.reshape(-1, c.shape[-1]).contiguous() for c in candidates]
    out = native().attn_res_mix_weights(rows, norm_weight.contiguous(), proj_weight.contiguous(), eps)
    return out.reshape(candidates[-1].shape)


def attn_res_takes(norm_weight: torch.Tensor, proj_weight: torch.Tensor, width: int) -> bool:
    """Whether the native mix reads these weights for rows `width` wide (fp32 rows given): for callers with
    no rows yet (the decode plan's binding)."""
    return (norm_weight.dtype in (torch.float32, torch.bfloat16) and proj_weight.dtype in (torch.float32, torch.bfloat16)
            and norm_weight.numel() == proj_weight.numel() == width)


# What a layer calls: natively, the query is formed inside the mix (no widening per call).
attn_res = register(
    "attn_res", examples=_attn_res_examples, reference=attn_res_reference, native=_attn_res_native,
    supports=lambda candidates, norm_weight, proj_weight, eps: (
        attn_res_takes(norm_weight, proj_weight, candidates[-1].shape[-1]) and _fp32_alike(candidates)))
