"""MLA prefill through PyTorch's fused scaled-dot-product attention: K/V are expanded from the latent
once per step, queries and keys carry the NoPE part and the shared extra key side by side, and the
causal mask (offset by the cached length) is left to SDPA's kernel instead of a [B, H, T, S] score
tensor, a mask fill and a separate softmax. Same arguments and result as `mla_naive`."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from k3.ops.mla.reference import causal_mask


def mla_sdpa(q_nope, q_x, c_kv, k_x, w_uk, w_uv, scale: float, q_offset: int) -> torch.Tensor:
    """q_nope [B, T, H, Dn], q_x [B, T, H, Dr], c_kv [B, S, R], k_x [B, S, Dr] -> o [B, T, H, Dv]."""
    B, T, H, _ = q_nope.shape
    S = c_kv.shape[1]
    dtype = q_nope.dtype
    k_nope = torch.einsum("bsr,hdr->bhsd", c_kv, w_uk.to(c_kv.dtype))
    v = torch.einsum("bsr,hdr->bhsd", c_kv, w_uv.to(c_kv.dtype))
    q = torch.cat((q_nope, q_x), dim=-1).transpose(1, 2)                                  # [B, H, T, Dn+Dr]
    k = torch.cat((k_nope, k_x.unsqueeze(1).expand(B, H, S, k_x.shape[-1])), dim=-1)      # [B, H, S, Dn+Dr]
    causal = q_offset == 0 and T == S
    mask = None if causal else causal_mask(T, S, q_offset, q.device)
    o = F.scaled_dot_product_attention(q, k.to(dtype), v.to(dtype), attn_mask=mask, is_causal=causal, scale=scale)
    return o.transpose(1, 2)
