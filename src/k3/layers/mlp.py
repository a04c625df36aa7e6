"""GLU MLP (gate/up/down), used for layer 0's dense MLP and the MoE shared experts."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from k3.layers.basic import Linear
from k3.layers.direct import Taken, bound, fused_matrix, matrix
from k3.layers.fused import project
from k3.ops.activation import glu
from k3.ops.dispatch import direct_kernels


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
        direct = self._direct(x)
        return direct if direct is not None else self.down(*project(self, self.input_names, x))

    def _direct(self, x: torch.Tensor) -> torch.Tensor | None:
        """Decode rows: forward's kernels in one native call (so its bits), or None where forward must run."""
        kernels = direct_kernels(x)
        args = self.direct_args(x) if kernels is not None else None
        return kernels.mlp_decode_step(x, *args[1:]) if args is not None else None

    def direct_args(self, x: torch.Tensor) -> tuple | None:
        """("mlp", the native MLP step's arguments after x) for decode rows x, or None."""
        return bound(self, self.bind_args) if direct_kernels(x) is not None else None

    def bind_args(self, take: Taken) -> tuple | None:
        """direct_args' tuple, from the weights `take` records (so a decoder layer can bind it with its own)."""
        step = self._bind_direct(take)
        return ("mlp", step.matrices, step.sizes, *step.act) if step is not None else None

    def _bind_direct(self, take: Taken) -> "MLPDecodeStep | None":
        inputs, down = fused_matrix(take, self, self.input_names), matrix(take, self, "down_proj")
        if inputs is None or down is None or self.act not in ("situ", "silu"):
            return None
        act = (0 if self.act == "situ" else 1, self.beta, self.linear_beta or 0.0)
        return MLPDecodeStep([*inputs.matrix.pair, *down.pair], list(inputs.sizes), act)

    def down(self, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        """The second half, from gate and up projections computed elsewhere (the MoE fuses them with its own)."""
        return self.down_proj(glu(gate, up, self.act, self.beta, self.linear_beta))


@dataclass(frozen=True)
class MLPDecodeStep:
    """GLUMLP's decode step as one native call (ops/native/decode_steps.cpp), its weights bound."""
    matrices: list[torch.Tensor]     # (weight, scale) of the fused gate/up group and down_proj
    sizes: list[int]
    act: tuple[int, float, float]    # activation code, beta, linear beta (0: none)
