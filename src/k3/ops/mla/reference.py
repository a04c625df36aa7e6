"""Naive MLA (NoPE): expand the latent cache to per-head keys and values, then causal softmax attention.

Shapes: q_nope [B, T, H, Dn], q_x [B, T, H, Dr]; c_kv [B, S, R] (normalised latent), k_x [B, S, Dr]
(shared extra key, never rotated); w_uk [H, Dn, R], w_uv [H, Dv, R] (the two halves of kv_b_proj).
Query t sits at absolute position q_offset + t and sees cache positions <= that.
"""

from __future__ import annotations

import torch


def causal_mask(T: int, S: int, q_offset: int, device) -> torch.Tensor:
    """[T, S] bool, True where query t may attend to key position s."""
    qpos = torch.arange(T, device=device).unsqueeze(1) + q_offset
    return torch.arange(S, device=device).unsqueeze(0) <= qpos


def mla_naive(q_nope, q_x, c_kv, k_x, w_uk, w_uv, scale: float, q_offset: int) -> torch.Tensor:
    """-> o [B, T, H, Dv] in q_nope.dtype; softmax in fp32 (or wider)."""
    k_nope = torch.einsum("bsr,hdr->bshd", c_kv, w_uk.to(c_kv.dtype))
    v = torch.einsum("bsr,hdr->bshd", c_kv, w_uv.to(c_kv.dtype))
    scores = torch.einsum("bthd,bshd->bhts", q_nope, k_nope) + torch.einsum("bthd,bsd->bhts", q_x, k_x)
    return _softmax_weighted(scores * scale, v, q_offset, "bhts,bshd->bthd")


def _softmax_weighted(scores, values, q_offset: int, pattern: str) -> torch.Tensor:
    T, S = scores.shape[-2:]
    mask = causal_mask(T, S, q_offset, scores.device)
    sdt = torch.promote_types(scores.dtype, torch.float32)
    p = torch.softmax(scores.to(sdt).masked_fill(~mask, float("-inf")), dim=-1).to(values.dtype)
    return torch.einsum(pattern, p, values)
