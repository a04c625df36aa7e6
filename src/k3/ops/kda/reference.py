"""Reference KDA: the gated delta rule, one token at a time (FLA naive_recurrent_kda's math).

S <- Diag(exp(g_t)) S;  u = beta_t (v_t - S^T k_t);  S <- S + k_t u^T;  o_t = S^T (scale q_t).
Decay acts along the KEY dimension. State layout [B, H, K, V], fp32 (or fp64 for fp64 inputs).
"""

from __future__ import annotations

import torch


def recurrent_kda(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
                  scale: float, initial_state: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """q, k, g [B, T, H, K] (q, k already L2-normalised; g = log-decay <= 0); v [B, T, H, V]; beta [B, T, H].

    Returns (o [B, T, H, V] in the compute dtype, final state [B, H, K, V]).
    """
    B, T, H, K = k.shape
    V = v.shape[-1]
    cdt = torch.promote_types(q.dtype, torch.float32)
    q, k, v, g, beta = (t.to(cdt) for t in (q, k, v, g, beta))
    S = q.new_zeros((B, H, K, V)) if initial_state is None else initial_state.to(cdt).clone()
    out = q.new_empty((B, T, H, V))
    for t in range(T):
        S = S * torch.exp(g[:, t]).unsqueeze(-1)
        pred = torch.einsum("bhk,bhkv->bhv", k[:, t], S)
        u = beta[:, t].unsqueeze(-1) * (v[:, t] - pred)
        S = S + k[:, t].unsqueeze(-1) * u.unsqueeze(-2)
        out[:, t] = torch.einsum("bhk,bhkv->bhv", q[:, t] * scale, S)
    return out, S
