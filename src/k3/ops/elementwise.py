"""Transcendental elementwise ops whose every element is computed the same way whatever the tensor's size.

PyTorch's CPU loops run the SIMD form (SLEEF-style approximations) over whole vectors and a scalar form
(libm) over the leftover tail; the two can differ in the last bit. Which elements fall in the tail
depends on the tensor's size, so sigmoid(x)[i] could change with the number of rows beside row i: a
sequence's result would depend on its batchmates, and a verify window's rows would not equal the
decode steps they stand for. Here the flattened input is padded to a multiple of `STEP` elements, so
every element takes the SIMD form. Under autograd (training) the plain op runs.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

STEP = 64   # a multiple of every vector loop's stride (two 16-lane fp32 vectors on AVX-512)


def padded(x: torch.Tensor) -> torch.Tensor:
    """x flattened and zero-padded to a multiple of STEP elements (a new tensor; x is not touched)."""
    flat = x.reshape(-1)
    return F.pad(flat, (0, (-flat.numel()) % STEP))


def _invariant(fn, x: torch.Tensor) -> torch.Tensor:
    if (x.requires_grad and torch.is_grad_enabled()) or x.numel() % STEP == 0:
        return fn(x)
    return fn(padded(x))[:x.numel()].view(x.shape)


def sigmoid(x: torch.Tensor) -> torch.Tensor:
    return _invariant(torch.sigmoid, x)


def softplus(x: torch.Tensor) -> torch.Tensor:
    return _invariant(F.softplus, x)


def silu(x: torch.Tensor) -> torch.Tensor:
    return _invariant(F.silu, x)
