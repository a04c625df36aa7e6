"""Routed MXFP4 experts as ops: one GLU expert, and one token through several experts of a bank.

Reference: each projection through `mxfp4_linear`, the GLU activation between them, and (for a token)
a loop over experts that adds each product, rounded to the accumulator's dtype, in the order given;
for several tokens, a loop over the experts they use (ascending), each on its tokens' rows.
Native: the three products and the activation in one call; a token's experts (the tokens' experts) in
parallel threads with the same sum order (bit-identical to the loops). `k3.ops.dispatch` picks per call.
"""

from __future__ import annotations

import torch

from k3.ops.activation import glu
from k3.ops.dispatch import register
from k3.ops.harness import Example, randn
from k3.ops.mxfp4.linear import mxfp4_example_weight, mxfp4_linear
from k3.ops.native import MAX_ROWS, native

MATS = ("w1", "w3", "w2")
KEYS = tuple(f"{m}_{k}" for m in MATS for k in ("packed", "scale"))   # the order the native kernels take


def _act_code(act: str) -> int:
    return 0 if act == "situ" else 1


def bank_takes(bank: dict[str, torch.Tensor], group_size: int, act: str) -> bool:
    """Whether the native expert kernels read this bank as it is (fp32 rows given): what `moe_tokens.supports`
    asks of the bank, for callers with no rows yet (the LatentMoE's native step)."""
    return group_size == 32 and act in ("situ", "silu") and all(bank[k].is_contiguous() for k in KEYS)


def _fusable(z: torch.Tensor, group_size: int, act: str) -> bool:
    return z.dtype == torch.float32 and z.shape[0] <= MAX_ROWS and group_size == 32 and act in ("situ", "silu")


def glu_expert_reference(z: torch.Tensor, w: dict[str, torch.Tensor], group_size: int, act: str, beta: float,
                         linear_beta: float | None) -> torch.Tensor:
    """z [N, dim] -> [N, dim] in z.dtype; w holds w{1,3,2}_packed / _scale (uint8) of one expert."""
    def mat(m: str, x: torch.Tensor) -> torch.Tensor:
        return mxfp4_linear(x, w[f"{m}_packed"], w[f"{m}_scale"], group_size)

    return mat("w2", glu(mat("w1", z), mat("w3", z), act, beta, linear_beta))


def _glu_expert_native(z, w, group_size, act, beta, linear_beta):
    return native().mxfp4_glu_expert(z.contiguous(), [w[k] for k in KEYS], _act_code(act), beta, linear_beta or 0.0)


def _bank(E: int, dim: int, inter: int) -> dict[str, torch.Tensor]:
    shapes = {"w1": (inter, dim), "w3": (inter, dim), "w2": (dim, inter)}
    bank = {}
    for i, m in enumerate(MATS):
        parts = [mxfp4_example_weight(*shapes[m], seed=10 * e + i) for e in range(E)]
        bank[f"{m}_packed"] = torch.stack([p for p, _ in parts])
        bank[f"{m}_scale"] = torch.stack([s for _, s in parts])
    return bank


def _sizes(large: bool) -> tuple[int, int, int]:
    return (8, 3584, 3072) if large else (5, 64, 96)


def _expert_examples(large: bool) -> list[Example]:
    E, dim, inter = _sizes(large)
    w = {k: v[1] for k, v in _bank(2, dim, inter).items()}
    return [Example(f"{n} rows, dim {dim}, inter {inter}, {act}", (randn(n, dim, seed=1, scale=0.1), w, 32, act, 1.0, None))
            for n in (1, 3) for act in ("situ", "silu")]


def _token_examples(large: bool) -> list[Example]:
    E, dim, inter = _sizes(large)
    return [Example(f"1 token through experts {[3, 0, 4]} of {E}", (randn(1, dim, seed=1, scale=0.1), _bank(E, dim, inter),
                                                               [3, 0, 4], [0.5, 0.3, 0.2], 32, "situ", 1.0, None,
                                                               randn(1, dim, seed=2)))]


def _tokens_examples(large: bool) -> list[Example]:
    E, dim, inter = _sizes(large)
    ids = torch.tensor([[3, 0], [0, 4], [1, 3]])
    return [Example(f"3 tokens, top 2 of {E}", (randn(3, dim, seed=1, scale=0.1), _bank(E, dim, inter), ids,
                                                torch.rand(3, 2, generator=torch.Generator().manual_seed(2)), 32, "situ",
                                                1.0, None))]


glu_expert = register("mxfp4_glu_expert", examples=_expert_examples, reference=glu_expert_reference, native=_glu_expert_native,
                      supports=lambda z, w, group_size, act, beta, linear_beta: _fusable(z, group_size, act))


def moe_token_reference(z: torch.Tensor, bank: dict[str, torch.Tensor], experts: list[int], weights: list[float],
                        group_size: int, act: str, beta: float, linear_beta: float | None,
                        acc: torch.Tensor) -> torch.Tensor:
    """One token z [1, dim]: acc [1, dim] += weights[i] * expert_{experts[i]}(z), in the order given, each
    product rounded to acc.dtype before it is added; bank holds [E, ...] tensors. Returns acc."""
    for e, wt in zip(experts, weights):
        y = glu_expert(z, {k: bank[k][e] for k in KEYS}, group_size, act, beta, linear_beta)
        acc.add_(y.to(acc.dtype) * torch.tensor(wt, dtype=acc.dtype))
    return acc


def _moe_token_native(z, bank, experts, weights, group_size, act, beta, linear_beta, acc):
    return acc.add_(native().mxfp4_moe_token(z.contiguous(), [bank[k] for k in KEYS], experts, weights,
                                             _act_code(act), beta, linear_beta or 0.0))


moe_token = register(
    "mxfp4_moe_token", examples=_token_examples, reference=moe_token_reference, native=_moe_token_native,
    supports=lambda z, bank, experts, weights, group_size, act, beta, linear_beta, acc: (
        z.shape[0] == 1 and acc.dtype == torch.float32 and _fusable(z, group_size, act)
        and all(bank[k].is_contiguous() for k in KEYS)))


def moe_tokens_reference(z: torch.Tensor, bank: dict[str, torch.Tensor], ids: torch.Tensor, weights: torch.Tensor,
                         group_size: int, act: str, beta: float, linear_beta: float | None) -> torch.Tensor:
    """Tokens z [N, dim], routed to experts ids [N, k] with weights [N, k] fp32 -> [N, dim] fp32:
    each expert used runs once on its rows (ascending expert order); products are rounded to fp32 and
    added to their token's sum in that order."""
    acc = torch.zeros(z.shape, dtype=torch.promote_types(z.dtype, torch.float32), device=z.device)
    for e in torch.unique(ids).tolist():
        tok, slot = (ids == e).nonzero(as_tuple=True)
        y = glu_expert(z[tok], {k: bank[k][e] for k in KEYS}, group_size, act, beta, linear_beta)
        acc.index_add_(0, tok, y.to(acc.dtype) * weights[tok, slot].unsqueeze(-1))
    return acc


def _moe_tokens_native(z, bank, ids, weights, group_size, act, beta, linear_beta):
    return native().mxfp4_moe_tokens(z.contiguous(), [bank[k] for k in KEYS], ids.contiguous(),
                                     weights.contiguous(), _act_code(act), beta, linear_beta or 0.0)


moe_tokens = register(
    "mxfp4_moe_tokens", examples=_tokens_examples, reference=moe_tokens_reference, native=_moe_tokens_native,
    supports=lambda z, bank, ids, weights, group_size, act, beta, linear_beta: (
        weights.dtype == torch.float32 and ids.dtype == torch.long and _fusable(z, group_size, act)
        and bank_takes(bank, group_size, act)))
