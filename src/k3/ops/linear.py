"""y = x W^T for weights stored more compactly than the activations (bf16 weights, fp32 compute on CPU).

Few rows (decode) on the CPU go to the native bf16 GEMV, which widens weights in registers and reads
each weight byte once; everything else casts the weight and calls F.linear (the reference: fp32
GEMM via MKL, and the only path autograd sees).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from k3.ops.native import MAX_ROWS, native


def use_native(x: torch.Tensor, w: torch.Tensor, weight_dtype: torch.dtype) -> bool:
    return (x.device.type == "cpu" and x.dtype == torch.float32 and w.dtype == weight_dtype
            and x.numel() // max(1, x.shape[-1]) <= MAX_ROWS and w.is_contiguous()
            and not (torch.is_grad_enabled() and (x.requires_grad or w.requires_grad))
            and native() is not None)


def linear(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """x [..., in] @ w[out, in].T -> [..., out] in x.dtype."""
    if use_native(x, w, torch.bfloat16):
        flat = x.reshape(-1, x.shape[-1]).contiguous()
        return native().bf16_linear(flat, w).reshape(*x.shape[:-1], w.shape[0])
    return F.linear(x, w if w.dtype == x.dtype else w.to(x.dtype))
