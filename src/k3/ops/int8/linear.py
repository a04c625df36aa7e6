"""y = x W^T for int8 trunk weights (q int8 [out, in], scale bf16 [out, ceil(in / 32)]).

Reference: dequantise (exact in fp32) and F.linear, on any device, the only path autograd sees.
Native: few rows (decode) multiply the int8 codes directly, reading each weight byte once (half the
bytes of bf16); many rows (prefill) dequantise with the native loop (the same bits) and take the
reference's own fp32 GEMM, so there the result equals the reference bit for bit.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from k3.ops.dispatch import register
from k3.ops.harness import Example, randn
from k3.ops.int8.format import dequantize
from k3.ops.native import MAX_ROWS, native


def int8_linear_reference(x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """x [..., in] -> [..., out] in x.dtype."""
    return F.linear(x, dequantize(q, scale, x.dtype))


def _int8_linear_native(x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    rows = x.shape[:-1].numel()
    if rows > MAX_ROWS:
        return F.linear(x, native().int8_dequantize(q, scale))
    flat = x.reshape(-1, x.shape[-1]).contiguous()
    return native().int8_linear(flat, q, scale).reshape(*x.shape[:-1], q.shape[0])


def _int8_examples(large: bool) -> list[Example]:
    from k3.ops.int8.format import quantize_reference

    out_, in_ = (2048, 7168) if large else (19, 70)
    q, scale = quantize_reference(randn(out_, in_, seed=1))
    return [Example(f"{n} rows, [{out_}, {in_}] int8", (randn(n, in_, seed=2), q, scale)) for n in (1, 5, 70)]


int8_linear = register(
    "int8_linear", examples=_int8_examples, tol=1e-4,  # per-group sums, bounded: tests/ops/test_int8.py
    reference=int8_linear_reference, native=_int8_linear_native,
    supports=lambda x, q, scale: (x.dtype == torch.float32 and q.dtype == torch.int8 and scale.dtype == torch.bfloat16
                                  and q.is_contiguous() and scale.is_contiguous()))
