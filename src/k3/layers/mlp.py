"""GLU MLP (gate/up/down), used for layer 0's dense MLP and the MoE shared experts."""

from __future__ import annotations

import torch
from torch import nn

from k3.layers.basic import Linear
from k3.layers.decode_weights import activation, fused_matrix, matrix
from k3.layers.fused import project
from k3.ops.activation import glu


class GLUMLP(nn.Module):
    def __init__(self, hidden: int, inter: int, act: str, beta: float, linear_beta: float | None):
        super().__init__()
        self.gate_proj = Linear(hidden, inter)
        self.up_proj = Linear(hidden, inter)
        self.down_proj = Linear(inter, hidden)
        self.act, self.beta, self.linear_beta = act, beta, linear_beta
        self.input_names = ("gate_proj", "up_proj")

    def shared_inputs(self) -> list[tuple[str, ...]]:
        """gate and up read the same input: one matrix (see layers/fused.py)."""
        return [self.input_names]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [..., hidden] -> [..., hidden]."""
        return self.down(*project(self, self.input_names, x))

    def decode_weights(self, kernels):
        """These weights as the native decode step reads them (`kernels.MlpWeights`), or None."""
        inputs, down = fused_matrix(kernels, self, self.input_names), matrix(kernels, self, "down_proj")
        act = activation(kernels, self.act, self.beta, self.linear_beta)
        if inputs is None or down is None or act is None:
            return None
        return kernels.MlpWeights(inputs=inputs[0], sizes=inputs[1], down=down, act=act)

    def down(self, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        """The second half, from gate and up projections computed elsewhere (the MoE fuses them with its own)."""
        return self.down_proj(glu(gate, up, self.act, self.beta, self.linear_beta))

