"""Parameter holders shared by every layer: a bias-free Linear and RMSNorm that compute in the input's dtype.

Weights may be stored more compactly than the activations (bf16 weights, fp32 compute on CPU):
they are cast at use, so the checkpoint's bytes can stay as they are in memory.
"""

from __future__ import annotations

import torch
from torch import nn

from k3.ops.linear import linear
from k3.ops.norm import rms_norm


def frozen(*shape: int, dtype: torch.dtype | None = None) -> nn.Parameter:
    """An uninitialised inference parameter; the loader replaces it with checkpoint data."""
    return nn.Parameter(torch.empty(*shape, dtype=dtype), requires_grad=False)


class Linear(nn.Module):
    """y = x W^T, W [out, in] (HF layout), computed in x.dtype."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.weight = frozen(out_features, in_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight)


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
