"""MoE routing: sigmoid scores, selection-only correction bias, top-k, renormalised weights."""

from __future__ import annotations

import torch

from k3.ops.elementwise import sigmoid
from k3.ops.precision import wide


def sigmoid_topk_route(logits: torch.Tensor, bias: torch.Tensor | None, top_k: int, renormalize: bool,
                       scaling: float) -> tuple[torch.Tensor, torch.Tensor]:
    """logits [N, E] (fp32) -> (weights [N, k] fp32, expert ids [N, k] int64).

    The bias only chooses experts; the weights come from the unbiased sigmoid scores.
    """
    scores = sigmoid(wide(logits))
    choose = scores if bias is None else scores + bias.to(scores.dtype)
    ids = torch.topk(choose, top_k, dim=-1).indices
    weights = scores.gather(-1, ids)
    if renormalize and top_k > 1:
        weights = weights / (weights.sum(-1, keepdim=True) + 1e-20)
    return weights * scaling, ids
