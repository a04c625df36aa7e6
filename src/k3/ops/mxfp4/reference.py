"""Reference MXFP4: dequantize the whole matrix, then an ordinary matmul. Plain and slow on purpose."""

from __future__ import annotations

import torch

from k3.ops.mxfp4.format import check_scales, e2m1_table, e8m0_table, unpack_codes


def dequantize(packed: torch.Tensor, scale: torch.Tensor, group_size: int = 32,
               dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """packed [..., out, in/2] uint8, scale [..., out, in/g] uint8 -> W [..., out, in] in `dtype`.

    Every value is exact in fp32 and bf16 (a 2-bit mantissa times a power of two).
    """
    check_scales(scale)
    codes = unpack_codes(packed).long()
    values = e2m1_table(torch.float32, packed.device)[codes]
    scales = e8m0_table(torch.float32, packed.device)[scale.long()]
    w = values.unflatten(-1, (-1, group_size)) * scales.unsqueeze(-1)
    return w.flatten(-2).to(dtype)


def mxfp4_linear_reference(x: torch.Tensor, packed: torch.Tensor, scale: torch.Tensor,
                           group_size: int = 32) -> torch.Tensor:
    """x [N, in] -> [N, out], computing in x.dtype."""
    return x @ dequantize(packed, scale, group_size, x.dtype).T
