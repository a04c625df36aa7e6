"""Banks of routed experts. The MoE layer asks `bank.iterate(experts)` for (expert, run) pairs in the
order given and calls `run(z)`; it cannot tell how weights are held.

`PackedExperts` keeps MXFP4 experts packed (4.25 bits/weight) and decodes them inside the matmul;
`DenseExperts` holds unquantised experts (checkpoints without a quantization_config);
`StreamedExperts` (streamed.py) reads packed experts from the shards through an expert store.
"""

from __future__ import annotations

import torch
from torch import nn

import functools
from collections.abc import Iterator

from k3.ops.activation import glu
from k3.ops.mxfp4 import dequantize, quantize
from k3.ops.mxfp4.expert import KEYS, glu_expert, moe_token, moe_tokens


class ExpertBank(nn.Module):
    def iterate(self, experts: list[int]) -> Iterator[tuple[int, object]]:
        """(expert, run) in the order given; run(z [N, dim]) -> [N, dim]."""
        for e in experts:
            yield e, functools.partial(self.forward, e)

    def weighted_sum(self, z: torch.Tensor, experts: list[int], weights: list[float], acc: torch.Tensor) -> torch.Tensor:
        """One token: acc [1, dim] (fp32) += weights[i] * expert_i(z), in the order given, each product
        rounded to acc.dtype before it is added. Returns acc."""
        for (_, run_expert), w in zip(self.iterate(experts), weights):
            acc.add_(run_expert(z).to(acc.dtype) * torch.tensor(w, dtype=acc.dtype))
        return acc

    def routed_sum(self, z: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        """Several tokens: z [N, dim], routing weights [N, k] fp32 and ids [N, k] -> sum_j w_j E_j(z) [N, dim]
        in fp32 (or wider): each expert used runs once, in ascending order, on the rows routed to it."""
        acc = torch.zeros(z.shape, dtype=torch.promote_types(z.dtype, torch.float32), device=z.device)
        for e, run_expert in self.iterate(torch.unique(ids).tolist()):
            tok, slot = (ids == e).nonzero(as_tuple=True)
            acc.index_add_(0, tok, run_expert(z[tok]).to(acc.dtype) * weights[tok, slot].unsqueeze(-1))
        return acc


class PackedExperts(ExpertBank):
    """Buffers w{1,3,2}_packed [E, out, in/2] and w{1,3,2}_scale [E, out, in/g], uint8."""

    def __init__(self, num_experts: int, dim: int, inter: int, group_size: int, act: str, beta: float,
                 linear_beta: float | None):
        super().__init__()
        self.group_size = group_size
        self.act, self.beta, self.linear_beta = act, beta, linear_beta
        for mat, (out, inp) in (("w1", (inter, dim)), ("w3", (inter, dim)), ("w2", (dim, inter))):
            self.register_buffer(f"{mat}_packed", torch.empty(num_experts, out, inp // 2, dtype=torch.uint8))
            self.register_buffer(f"{mat}_scale", torch.empty(num_experts, out, inp // group_size, dtype=torch.uint8))

    def _bank(self) -> dict[str, torch.Tensor]:
        return {k: getattr(self, k) for k in KEYS}

    def weighted_sum(self, z, experts, weights, acc):
        return moe_token(z, self._bank(), experts, weights, self.group_size, self.act, self.beta, self.linear_beta, acc)

    def routed_sum(self, z, weights, ids):
        return moe_tokens(z, self._bank(), ids, weights, self.group_size, self.act, self.beta, self.linear_beta)

    def forward(self, e: int, z: torch.Tensor) -> torch.Tensor:
        """z [N, dim] -> [N, dim] in z.dtype."""
        w = {k: getattr(self, k)[e] for k in KEYS}
        return glu_expert(z, w, self.group_size, self.act, self.beta, self.linear_beta)


class DenseExperts(ExpertBank):
    """Parameters w1, w3 [E, inter, dim] and w2 [E, dim, inter].

    With `fake_quant` on (quantisation-aware training), each use sees the weights rounded to MXFP4,
    and gradients pass straight through to the float weights.
    """

    def __init__(self, num_experts: int, dim: int, inter: int, act: str, beta: float, linear_beta: float | None):
        super().__init__()
        self.act, self.beta, self.linear_beta = act, beta, linear_beta
        self.fake_quant = False
        self.w1 = nn.Parameter(torch.empty(num_experts, inter, dim), requires_grad=False)
        self.w3 = nn.Parameter(torch.empty(num_experts, inter, dim), requires_grad=False)
        self.w2 = nn.Parameter(torch.empty(num_experts, dim, inter), requires_grad=False)

    def _weight(self, w: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        if not self.fake_quant:
            return w.to(z.dtype)
        q = dequantize(*quantize(w), dtype=z.dtype)
        return w.to(z.dtype) + (q - w.to(z.dtype)).detach()

    def forward(self, e: int, z: torch.Tensor) -> torch.Tensor:
        w1, w3, w2 = (self._weight(w[e], z) for w in (self.w1, self.w3, self.w2))
        return glu(z @ w1.T, z @ w3.T, self.act, self.beta, self.linear_beta) @ w2.T
