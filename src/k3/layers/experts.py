"""Banks of routed experts. The MoE layer calls `bank(e, z)` and cannot tell how weights are held.

`PackedExperts` keeps MXFP4 experts packed (4.25 bits/weight) and decodes them inside the matmul;
`DenseExperts` holds unquantised experts (checkpoints without a quantization_config).
"""

from __future__ import annotations

import torch
from torch import nn

from k3.ops.activation import glu
from k3.ops.mxfp4 import dequantize, mxfp4_linear, quantize

MATS = ("w1", "w3", "w2")


class PackedExperts(nn.Module):
    """Buffers w{1,3,2}_packed [E, out, in/2] and w{1,3,2}_scale [E, out, in/g], uint8."""

    def __init__(self, num_experts: int, dim: int, inter: int, group_size: int, act: str, beta: float,
                 linear_beta: float | None):
        super().__init__()
        self.group_size = group_size
        self.act, self.beta, self.linear_beta = act, beta, linear_beta
        for mat, (out, inp) in (("w1", (inter, dim)), ("w3", (inter, dim)), ("w2", (dim, inter))):
            self.register_buffer(f"{mat}_packed", torch.empty(num_experts, out, inp // 2, dtype=torch.uint8))
            self.register_buffer(f"{mat}_scale", torch.empty(num_experts, out, inp // group_size, dtype=torch.uint8))

    def _mat(self, mat: str, e: int, x: torch.Tensor) -> torch.Tensor:
        packed = getattr(self, f"{mat}_packed")[e]
        scale = getattr(self, f"{mat}_scale")[e]
        return mxfp4_linear(x, packed, scale, self.group_size)

    def forward(self, e: int, z: torch.Tensor) -> torch.Tensor:
        """z [N, dim] -> [N, dim] in z.dtype."""
        h = glu(self._mat("w1", e, z), self._mat("w3", e, z), self.act, self.beta, self.linear_beta)
        return self._mat("w2", e, h)


class DenseExperts(nn.Module):
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
