"""Absorbed MLA for decode: attention runs in the latent space; keys and values are never expanded.

score = ((W_UK_h^T q_nope_h) . c_kv + q_x_h . k_x) * scale;  o_h = W_UV_h (sum_s p_s c_kv_s).
Same arguments and result as `mla_naive`. The per-head products read kv_b_proj's halves as stored
(`head_linear`), so a decode step never widens them.
"""

from __future__ import annotations

import torch

from k3.ops.linear import head_linear
from k3.ops.mla.reference import _softmax_weighted


def mla_absorbed(q_nope, q_x, c_kv, k_x, w_uk, w_uv, scale: float, q_offset: int) -> torch.Tensor:
    q_lat = head_linear(q_nope, w_uk, transpose=True)                      # [b, t, h, R]
    scores = torch.einsum("bthr,bsr->bhts", q_lat, c_kv) + torch.einsum("bthd,bsd->bhts", q_x, k_x)
    o_lat = _softmax_weighted(scores * scale, c_kv, q_offset, "bhts,bsr->bthr")
    return head_linear(o_lat, w_uv)                                        # [b, t, h, Dv]
