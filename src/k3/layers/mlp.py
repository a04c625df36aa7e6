"""GLU MLP (gate/up/down), used for layer 0's dense MLP and the MoE shared experts."""

from __future__ import annotations

import torch
from torch import nn

from k3.layers.basic import Linear
from k3.layers.decode_weights import Bound, activation, fused_matrix, matrix
from k3.layers.step_examples import example_config, random_layer
from k3.layers.steps import ffn_native, ffn_supports
from k3.layers.fused import project
from k3.ops.activation import glu
from k3.ops.dispatch import register
from k3.ops.harness import Example, randn


class GLUMLP(nn.Module):
    def __init__(self, hidden: int, inter: int, act: str, beta: float, linear_beta: float | None):
        super().__init__()
        self.gate_proj = Linear(hidden, inter)
        self.up_proj = Linear(hidden, inter)
        self.down_proj = Linear(inter, hidden)
        self.act, self.beta, self.linear_beta = act, beta, linear_beta
        self.input_names = ("gate_proj", "up_proj")
        self.fused: dict = {}     # the loader's SharedInput groups (layers/fused.py)
        self.bound = Bound()      # the native step's weights (steps.step_weights)

    def shared_inputs(self) -> list[tuple[str, ...]]:
        """gate and up read the same input: one matrix (see layers/fused.py)."""
        return [self.input_names]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [..., hidden] -> [..., hidden]. Rows the native step takes run it in one call (layers/steps.py);
        the rest run `forward_ops`."""
        rows = x.reshape(-1, x.shape[-1])
        if mlp_layer_step.use_native(self, rows):
            return mlp_layer_step.native(self, rows).reshape(x.shape)
        return self.forward_ops(x)

    def forward_ops(self, x: torch.Tensor) -> torch.Tensor:
        """The layer op by op: its modules and the registry's ops (the native step's reference)."""
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



def _step_examples(large: bool) -> list[Example]:
    c = example_config(large)
    act = (c.hidden_act, c.situ_beta, c.situ_linear_beta)
    layer = random_layer(GLUMLP(c.hidden_size, c.intermediate_size, *act), seed=61)
    return [Example(f"{n} rows, hidden {c.hidden_size}, inner {c.intermediate_size}",
                    (layer, randn(n, c.hidden_size, seed=62 + n))) for n in (1, 4)]


mlp_layer_step = register("mlp_layer_step", examples=_step_examples, reference=lambda layer, x: layer.forward_ops(x),
                          native=ffn_native, supports=ffn_supports)
