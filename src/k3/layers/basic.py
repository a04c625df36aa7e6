"""Parameter holders shared by every layer: a bias-free Linear and RMSNorm that compute in the input's dtype.

Weights may be stored more compactly than the activations (bf16 weights, fp32 compute on CPU):
they are cast at use, so the checkpoint's bytes can stay as they are in memory.
"""

from __future__ import annotations

import torch
from torch import nn

from k3.ops.int8 import Int8FormatError, check_int8_pair, int8_linear, scale_shape
from k3.ops.linear import linear
from k3.ops.norm import rms_norm


def frozen(*shape: int, dtype: torch.dtype | None = None) -> nn.Parameter:
    """An uninitialised inference parameter; the loader replaces it with checkpoint data."""
    return nn.Parameter(torch.empty(*shape, dtype=dtype), requires_grad=False)


class Linear(nn.Module):
    """y = x W^T, W [out, in] (HF layout), computed in x.dtype.

    An int8 trunk (k3.ops.int8) keeps W as int8 codes with a bf16 `weight_scale` [out, ceil(in / 32)]
    buffer; otherwise `weight_scale` is None and W is a float matrix."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.weight = frozen(out_features, in_features)
        self.register_buffer("weight_scale", None)

    def make_int8(self) -> None:
        """Hold int8 codes from now on: placeholders the loader fills (or `set_int8` replaces)."""
        out, inp = self.weight.shape
        self._parameters["weight"] = frozen(out, inp, dtype=torch.int8)
        self._buffers["weight_scale"] = torch.empty(scale_shape(out, inp), dtype=torch.bfloat16)

    def set_int8(self, q: torch.Tensor, scale: torch.Tensor) -> None:
        """Hold these codes and scales (k3.ops.int8.quantize's pair; refused unless they fit this layer)."""
        check_int8_pair(q, scale)
        if tuple(q.shape) != tuple(self.weight.shape):
            raise Int8FormatError(f"codes {list(q.shape)} for a {list(self.weight.shape)} weight")
        self._parameters["weight"] = nn.Parameter(q, requires_grad=False)
        self._buffers["weight_scale"] = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = self._buffers["weight_scale"]
        return linear(x, self.weight) if scale is None else int8_linear(x, self.weight, scale)


def set_tensor(module: nn.Module, leaf: str, t: torch.Tensor) -> None:
    """Put a loaded tensor in place: as a buffer where `module` holds one by that name, else a parameter."""
    if leaf in module._buffers:
        module._buffers[leaf] = t
    else:
        module._parameters[leaf] = nn.Parameter(t, requires_grad=False)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = frozen(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight, self.eps)


class WeightOnly(nn.Module):
    """A bare weight tensor under the name `<module>.weight` (conv taps, output norms, AttnRes queries)."""

    def __init__(self, *shape: int, dtype: torch.dtype | None = None):
        super().__init__()
        self.weight = frozen(*shape, dtype=dtype)
