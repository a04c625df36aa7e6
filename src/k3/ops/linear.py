"""y = x W^T for weights stored more compactly than the activations (bf16 weights, fp32 compute on CPU).

Few rows (decode) on the CPU go to the native bf16 kernels, which widen weights in registers and read
each weight byte once; everything else casts the weight and calls F.linear / einsum (the reference:
fp32 GEMM via MKL, and the only path autograd sees).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from k3.ops.native import MAX_ROWS, cpu_inference, native


def use_native(x: torch.Tensor, w: torch.Tensor, weight_dtype: torch.dtype) -> bool:
    """Decode-sized fp32 activations on the CPU against a `weight_dtype` weight, outside autograd."""
    return (x.dtype == torch.float32 and w.dtype == weight_dtype and x.numel() // max(1, x.shape[-1]) <= MAX_ROWS
            and cpu_inference(x, w))


def linear(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """x [..., in] @ w[out, in].T -> [..., out] in x.dtype."""
    if use_native(x, w, torch.bfloat16) and w.is_contiguous():
        flat = x.reshape(-1, x.shape[-1]).contiguous()
        return native().bf16_linear(flat, w).reshape(*x.shape[:-1], w.shape[0])
    return F.linear(x, w if w.dtype == x.dtype else w.to(x.dtype))


def head_linear(x: torch.Tensor, w: torch.Tensor, transpose: bool = False) -> torch.Tensor:
    """A separate small matrix per head. x [..., H, in], w [H, R, C] ->
    transpose False: y[..., h, r] = sum_c w[h, r, c] x[..., h, c]   (in = C, out R)
    transpose True:  y[..., h, c] = sum_r w[h, r, c] x[..., h, r]   (in = R, out C)
    MLA's absorbed decode uses both forms on the halves of kv_b_proj; bf16 weights are read as they
    are stored by the native kernel instead of being widened to fp32 every step."""
    H, R, C = w.shape
    if use_native(x.reshape(-1, H * x.shape[-1]), w, torch.bfloat16) and w.stride(2) == 1:
        flat = x.reshape(-1, H, x.shape[-1]).contiguous()
        return native().bf16_head_linear(flat, w, transpose).reshape(*x.shape[:-1], C if transpose else R)
    wx = w if w.dtype == x.dtype else w.to(x.dtype)
    return torch.einsum("...hr,hrc->...hc", x, wx) if transpose else torch.einsum("...hc,hrc->...hr", x, wx)
