"""What the decode plan's native steps read from a layer's modules, and when that must be read again.

A layer's `decode_weights(kernels)` returns its weights as the native structs the steps take
(ops/native/decode_steps.cpp: `KdaWeights`, `MoeWeights`, ...), or None when its weights do not suit
the kernels as they are (dtype, layout, a fused group undone, weights that need a gradient). The plan
(model/plan_binding.py) builds them once and keeps them until the weights change.

Weights change through events, each of which advances one counter (`generation()`), and a plan bound
under an older count binds again; nothing is re-checked per step:
  - a parameter, buffer or submodule set on any module (`layer.weight = nn.Parameter(...)`,
    `moe.experts = StreamedExperts(...)`): torch's global registration hooks;
  - the loader, `set_int8`, the fused groups and the streamed trunk, which write `_parameters`
    directly: they call `weights_changed()`;
  - `model.to(...)`, `.float()`, `.half()` on the model: its `_apply`.
Writing into a weight in place (`weight.copy_(...)`, the loader filling fused blocks) needs nothing: the
steps hold the tensors themselves and read their values when they run. Code that gives a single
parameter new storage some other way (`param.data = ...`, `.to()` on a submodule) calls
`weights_changed()` (or `model.weights_changed()`) itself.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.modules import module as torch_module

_generation = 0
_NO_SCALE = torch.empty(0)


def weights_changed() -> None:
    """Some module's weights were replaced: every bound decode plan binds again at its next step."""
    global _generation
    _generation += 1


def generation() -> int:
    return _generation


def _registered(module: nn.Module, name: str, value):
    weights_changed()
    return None   # keep the value as given


torch_module.register_module_parameter_registration_hook(_registered)
torch_module.register_module_buffer_registration_hook(_registered)
torch_module.register_module_module_registration_hook(_registered)


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
    group = module.__dict__.get("_fused", {}).get(names)
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
