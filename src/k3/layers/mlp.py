"""GLU MLP (gate/up/down), used for layer 0's dense MLP and the MoE shared experts."""

from __future__ import annotations

import torch
from torch import nn

from k3.layers.basic import Linear
from k3.ops.activation import glu


class GLUMLP(nn.Module):
    def __init__(self, hidden: int, inter: int, act: str, beta: float, linear_beta: float | None):
        super().__init__()
        self.gate_proj = Linear(hidden, inter)
        self.up_proj = Linear(hidden, inter)
        self.down_proj = Linear(inter, hidden)
        self.act, self.beta, self.linear_beta = act, beta, linear_beta

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [..., hidden] -> [..., hidden]."""
        return self.down_proj(glu(self.gate_proj(x), self.up_proj(x), self.act, self.beta, self.linear_beta))
