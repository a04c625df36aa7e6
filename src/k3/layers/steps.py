"""Each sublayer's decode step as a registered op (ops/dispatch.py): KDA, MLA, the LatentMoE and the dense
MLP each register one (`kda_layer_step`, `mla_layer_step`, `moe_layer_step`, `mlp_layer_step`, at the end
of their files), so the op harness checks the C++ step bodies (ops/native/decode_steps.cpp) against the
layers' own Python bodies at every SIMD level and times both (tests/ops/test_op_harness.py,
benchmarks/ops.py).

An op takes the layer, the rows and, for attention, the group's step state (layers/step_state.py: plain
tensors built by the state's owner, never a view), so the harness can give each side its own copy of it.
Its native entry is the one native call of the step on the layer's bound weights (`step_weights(layer,
kernels)`); its reference is the layer's `forward_ops` (its modules and the registry's ops, op by op) on
the same rows and the same step state. A layer's forward runs the native entry for the rows it takes,
else `forward_ops`: there is no third way.
"""

from __future__ import annotations

import torch

from k3.layers.batch import ForwardBatch
from k3.ops.dispatch import decode_kernels, loaded_kernels


def step_weights(layer, kernels):
    """`layer.decode_weights(kernels)`, built once and kept in its `bound` until the model's `weights_changed()`."""
    return layer.bound.get(kernels, layer.decode_weights)


def step_kernels(layer, x: torch.Tensor):
    """The native kernels when rows x [N, hidden] may take `layer`'s native step (ops.dispatch.decode_kernels:
    fp32, N <= MAX_ROWS, outside autograd, kernels built) and its weights bind; else None."""
    kernels = decode_kernels(x)
    return None if kernels is None or step_weights(layer, kernels) is None else kernels


def attention_native(layer, x: torch.Tensor, step) -> torch.Tensor:
    """An attention layer's step in one native call, on its step state (a KdaStep or MlaStep)."""
    kernels = loaded_kernels()
    return kernels.attention_step(x, step_weights(layer, kernels), step.kernel_state(kernels))


def attention_supports(layer, x: torch.Tensor, step) -> bool:
    return step_kernels(layer, x) is not None and step.kernel_takes()


def ffn_native(layer, x: torch.Tensor) -> torch.Tensor:
    """An FFN layer's (LatentMoE, dense MLP) step in one native call."""
    kernels = loaded_kernels()
    return kernels.ffn_step(x, step_weights(layer, kernels))


def ffn_supports(layer, x: torch.Tensor) -> bool:
    return step_kernels(layer, x) is not None


def rows_batch(sequences: int, positions: int) -> ForwardBatch:
    """The batch of a step's reference: `sequences` decoding one token each (positions 1), or verify windows
    of `positions` each (rows sequence by sequence, position by position)."""
    windows = (True,) * sequences if positions > 1 else ()
    return ForwardBatch((positions,) * sequences, (0,) * sequences, windows=windows)
