"""y = x W^T for weights stored more compactly than the activations (bf16 weights, fp32 compute on CPU).

Reference: cast the weight and call F.linear / einsum (fp32 GEMM via MKL; the only path autograd
sees). Native: few rows (decode) widen bf16 weights in registers and read each weight byte once;
many rows (prefill) run the native blocked GEMM or the reference's GEMM on a natively widened weight.
`k3.ops.dispatch` picks per call.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from k3.ops.dispatch import register
from k3.ops.dot_linear import dot_linear
from k3.ops.harness import Example, randn
from k3.ops.native import MAX_ROWS, native, prefill_gemm


def _few_bf16_rows(x: torch.Tensor, w: torch.Tensor) -> bool:
    return x.dtype == torch.float32 and w.dtype == torch.bfloat16 and (x.dim() == 1 or x.shape[:-1].numel() <= MAX_ROWS)


def linear_reference(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """x [..., in] @ w[out, in].T -> [..., out] in x.dtype."""
    return F.linear(x, w if w.dtype == x.dtype else w.to(x.dtype))


def _linear_native(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Few rows: the bf16 GEMV kernel. Many (prefill): the native blocked GEMM where `prefill_gemm()`
    says so, else the reference's own fp32 GEMM on the weight widened by the native loop (so the result
    equals the reference bit for bit), or, where the user chose `bf16-dot`, x rounded to bf16 on the
    CPU's dot-product units (not this op's exact reference: its own op, `bf16_dot_linear`)."""
    few = _few_bf16_rows(x, w)
    if not few and prefill_gemm() == "torch":
        return F.linear(x, native().bf16_widen(w))
    if not few and prefill_gemm() == "bf16-dot":   # the opt-in that rounds x (ops/dot_linear.py)
        return dot_linear(x, w)
    flat = x.reshape(-1, x.shape[-1]).contiguous()
    kernel = native().bf16_linear if few else native().bf16_gemm
    return kernel(flat, w).reshape(*x.shape[:-1], w.shape[0])


def _linear_examples(large: bool) -> list[Example]:
    out_, in_ = (2048, 7168) if large else (19, 70)
    w = randn(out_, in_, seed=1, dtype=torch.bfloat16)
    return [Example(f"{n} rows, [{out_}, {in_}] bf16", (randn(n, in_, seed=2), w)) for n in (1, 5, 70)]


def _head_linear_examples(large: bool) -> list[Example]:
    H, R, C = (96, 128, 512) if large else (3, 7, 13)
    w = randn(H, R, C, seed=1, dtype=torch.bfloat16)
    return [Example(f"{n} rows, {H} heads, [{R}, {C}]{' transposed' if t else ''}",
                    (randn(n, H, R if t else C, seed=2), w, t)) for n in (1, 4) for t in (False, True)]


linear = register("bf16_linear", examples=_linear_examples, reference=linear_reference, native=_linear_native,
                  supports=lambda x, w: x.dtype == torch.float32 and w.dtype == torch.bfloat16 and w.is_contiguous())


def head_linear_reference(x: torch.Tensor, w: torch.Tensor, transpose: bool = False) -> torch.Tensor:
    """A separate small matrix per head. x [..., H, in], w [H, R, C] ->
    transpose False: y[..., h, r] = sum_c w[h, r, c] x[..., h, c]   (in = C, out R)
    transpose True:  y[..., h, c] = sum_r w[h, r, c] x[..., h, r]   (in = R, out C)
    MLA's absorbed decode uses both forms on the halves of kv_b_proj; the native kernel reads bf16
    weights as they are stored instead of widening them to fp32 every step."""
    wx = w if w.dtype == x.dtype else w.to(x.dtype)
    return torch.einsum("...hr,hrc->...hc", x, wx) if transpose else torch.einsum("...hc,hrc->...hr", x, wx)


def _head_linear_native(x: torch.Tensor, w: torch.Tensor, transpose: bool = False) -> torch.Tensor:
    H, R, C = w.shape
    flat = x.reshape(-1, H, x.shape[-1]).contiguous()
    return native().bf16_head_linear(flat, w, transpose).reshape(*x.shape[:-1], C if transpose else R)


head_linear = register(
    "bf16_head_linear", examples=_head_linear_examples, reference=head_linear_reference, native=_head_linear_native,
    supports=lambda x, w, transpose=False: _few_bf16_rows(x.reshape(-1, w.shape[0] * x.shape[-1]), w) and w.stride(2) == 1)
