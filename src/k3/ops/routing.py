"""MoE routing: sigmoid scores, selection-only correction bias, top-k, renormalised weights.

Reference: the ATen ops below. Native (fp32 decode rows, outside autograd): one call instead of about
a dozen small ops (`moe_route_rows`; the same selection, weights equal up to the last bit of exp).
`k3.ops.dispatch` picks.
"""

from __future__ import annotations

import torch

from k3.ops.dispatch import register
from k3.ops.elementwise import sigmoid
from k3.ops.harness import Example, randn
from k3.ops.native import MAX_ROWS, native
from k3.ops.precision import wide


def sigmoid_topk_route_reference(logits: torch.Tensor, bias: torch.Tensor | None, top_k: int, renormalize: bool,
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


def _route_native(logits, bias, top_k, renormalize, scaling):
    b = bias.contiguous() if bias is not None else logits.new_empty(0)
    return tuple(native().moe_route_rows(logits.contiguous(), b, top_k, renormalize, scaling))


def _route_examples(large: bool) -> list[Example]:
    E, k = (384, 8) if large else (23, 3)
    return [Example(f"{n} tokens, {E} experts, top {k}{', bias' if bias else ''}",
                    (randn(n, E, seed=n), randn(E, seed=9, scale=0.1) if bias else None, k, True, 2.5))
            for n in (1, 5) for bias in (False, True)]


sigmoid_topk_route = register(
    "moe_route", examples=_route_examples, reference=sigmoid_topk_route_reference, native=_route_native,
    supports=lambda logits, bias, top_k, renormalize, scaling: (
        logits.dim() == 2 and logits.dtype == torch.float32 and logits.shape[0] <= MAX_ROWS
        and 1 <= top_k <= logits.shape[1] and (bias is None or bias.dtype == torch.float32)))
