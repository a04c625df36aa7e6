"""y = bf16(x) W^T on the CPU's bf16 dot-product units: prefill products with the activations rounded to bf16.

An opt-in (`K3_PREFILL_GEMM=bf16-dot`): k3's default products are exact fp32 sums of fp32 activations times
the stored weights. Here x's values are rounded to bf16 (to nearest, ties to even) first; each product of
two bf16 values is exact in fp32 and the sums are fp32, so what changes is x's rounding, a relative
2^-9 per value at most (how much that moves logits: docs/design/precision.md). AVX512_BF16's vdpbf16ps
(gemm_dot.cpp) does two of those multiply-adds per lane per instruction, twice an fp32 FMA's; on a CPU
without it the same rounded product runs through the fp32 GEMM.

Reference: x rounded by PyTorch, the weight widened (MXFP4 decoded), one fp32 matmul.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from k3.ops.dispatch import register
from k3.ops.harness import Example, randn
from k3.ops.mxfp4.linear import mxfp4_example_weight
from k3.ops.mxfp4.reference import dequantize
from k3.ops.native import native


def rounded(x: torch.Tensor) -> torch.Tensor:
    """x's values rounded to bf16, kept in x's dtype."""
    return x.to(torch.bfloat16).to(x.dtype)


def dot_linear_reference(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """x [..., in] fp32, w [out, in] bf16 -> bf16(x) @ w.T [..., out] fp32."""
    return F.linear(rounded(x), w.to(x.dtype))


def _dot_linear_native(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    flat = x.reshape(-1, x.shape[-1]).contiguous()
    return native().bf16_dot_gemm(flat, w).reshape(*x.shape[:-1], w.shape[0])


def _examples(large: bool) -> list[Example]:
    """Odd sizes: a row tile and a panel cut short, an odd depth, and a second depth block when large."""
    out_, in_ = (2048, 2049) if large else (37, 301)
    w = randn(out_, in_, seed=1, dtype=torch.bfloat16)
    return [Example(f"{n} rows, [{out_}, {in_}] bf16", (randn(n, in_, seed=2), w)) for n in (13, 70)]


dot_linear = register("bf16_dot_linear", examples=_examples, reference=dot_linear_reference, native=_dot_linear_native,
                      supports=lambda x, w: x.dtype == torch.float32 and w.dtype == torch.bfloat16 and w.is_contiguous())


def mxfp4_dot_linear_reference(x: torch.Tensor, packed: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """x [N, in] fp32, MXFP4 codes [out, in / 2] and scales [out, in / 32] -> bf16(x) @ W.T [N, out] fp32."""
    return F.linear(rounded(x), dequantize(packed, scale, 32, x.dtype))


def _mxfp4_examples(large: bool) -> list[Example]:
    out_, in_ = (1024, 2048) if large else (37, 96)
    packed, scale = mxfp4_example_weight(out_, in_, seed=3)
    return [Example(f"{n} rows, [{out_}, {in_}] MXFP4", (randn(n, in_, seed=4), packed, scale)) for n in (13, 70)]


mxfp4_dot_linear = register(
    "mxfp4_dot_linear", examples=_mxfp4_examples, reference=mxfp4_dot_linear_reference,
    native=lambda x, packed, scale: native().mxfp4_dot_gemm(x.contiguous(), packed, scale),
    supports=lambda x, packed, scale: x.dtype == torch.float32 and x.dim() == 2 and packed.is_contiguous()
    and scale.is_contiguous())
