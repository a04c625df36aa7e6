"""What the native decode steps read from a layer's modules, and when that must be read again.

A layer's `decode_weights(kernels)` returns its weights as the native structs its step takes
(ops/native/decode_steps.cpp: `KdaWeights`, `MoeWeights`, ...), or None when its weights do not suit
the kernels as they are (dtype, layout, a fused group undone, weights that need a gradient). The layer
keeps what it built in its `bound` (a `Bound`), and the whole decode plan keeps its binding on the model
(model/plan_binding.py); nothing is checked per step.

Weight changes are explicit: whoever gives weights new storage calls `model.weights_changed()`, which
empties every `Bound` and the plan's binding. The loader, the streamed trunk and experts and the
model's `.to()`/`.float()` do; code that replaces a weight itself (`layer.weight = nn.Parameter(...)`,
`param.data = ...`) calls it too. Writing into a weight in place (`weight.copy_(...)`, the loader filling
fused blocks) needs nothing: the steps hold the tensors themselves and read their values when they run.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

_NO_SCALE = torch.empty(0)


class Bound:
    """A layer's weights as its native step reads them: built by `build(kernels)` on first use, kept
    until `clear()` (model.weights_changed)."""

    def __init__(self):
        self.kernels = None
        self.value = None

    def get(self, kernels, build: Callable):
        if self.kernels is not kernels:
            self.value, self.kernels = build(kernels), kernels
        return self.value

    def clear(self) -> None:
        self.kernels = self.value = None


def forget_bound(model: nn.Module) -> None:
    """Every layer of `model` builds its native weights again at its next step."""
    for module in model.modules():
        bound = module.__dict__.get("bound")
        if isinstance(bound, Bound):
            bound.clear()


def matrix(kernels, module: nn.Module, name: str):
    """Linear `module.<name>` as a `kernels.Matrix` for the decode GEMV (bf16, or int8 codes with bf16
    scales), or None when its weight does not suit it as it is."""
    lin = getattr(module, name, None)
    if lin is None:
        return None
    w, scale = lin.weight, lin._buffers.get("weight_scale")
    return _matrix(kernels, w, scale)


def _matrix(kernels, w: torch.Tensor, scale: torch.Tensor | None):
    if scale is None:
        ok = w.dtype == torch.bfloat16 and w.is_contiguous()
    else:
        ok = w.dtype == torch.int8 and scale.dtype == torch.bfloat16 and w.is_contiguous() and scale.is_contiguous()
    if not ok or w.requires_grad or not w.is_cpu:
        return None
    return kernels.Matrix(weight=w, scale=_NO_SCALE if scale is None else scale)


def fused_matrix(kernels, module: nn.Module, names: tuple[str, ...]):
    """(kernels.Matrix, member widths) of the group `names` (layers/fused.py), when the loader fused it,
    it is still intact and its matrix suits the GEMV; else None."""
    group = module.fused.get(names)
    if group is None or not group.intact():
        return None
    m = _matrix(kernels, group.weight, group.scale)
    return None if m is None else (m, list(group.sizes))


def float_weights(module: nn.Module, names: tuple[str, ...],
                  dtypes: tuple[torch.dtype, ...] = (torch.float32,)) -> list[torch.Tensor] | None:
    """`module.<name>.weight` (or the tensor `module.<name>` itself) for each name, when every one is a
    contiguous CPU tensor of one of `dtypes` that needs no gradient."""
    out = []
    for name in names:
        t = getattr(module, name, None)
        if isinstance(t, nn.Module):
            t = getattr(t, "weight", None)
        if (not isinstance(t, torch.Tensor) or t.dtype not in dtypes or not t.is_contiguous() or t.requires_grad
                or not t.is_cpu):
            return None
        out.append(t)
    return out


def activation(kernels, act: str, beta: float, linear_beta: float | None):
    """A GLU activation as the kernels take it, or None for one they do not have."""
    if act not in ("situ", "silu"):
        return None
    return kernels.Activation(code=0 if act == "situ" else 1, beta=beta, linear_beta=linear_beta or 0.0)
