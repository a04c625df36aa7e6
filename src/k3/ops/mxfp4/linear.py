"""Packed MXFP4 matmul, never unpacking a whole expert at once.

The PyTorch path (`mxfp4_linear_tiled`) decodes rows tile by tile; on the CPU (`k3.ops.dispatch`
chooses) few fp32 rows run the native kernel instead, and many the native blocked GEMM where
`k3.ops.native.prefill_gemm()` is native. The decode tables are cached per (dtype, device).
Scales are validated when checkpoints load, so this path does not re-scan them. Both equal
`mxfp4_linear_reference` up to matmul rounding.
"""

from __future__ import annotations

import functools

import torch

from k3.ops.dispatch import register
from k3.ops.harness import Example, randn
from k3.ops.mxfp4.format import e2m1_table, e8m0_table
from k3.ops.native import MAX_ROWS, native, prefill_gemm

ROW_TILE = 1024


@functools.lru_cache(maxsize=16)
def _tables(dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    # A [256, 2] table decodes both nibbles of a byte in one lookup.
    e2m1 = e2m1_table(dtype, device)
    byte = torch.arange(256, device=device)
    pair = torch.stack((e2m1[byte & 0xF], e2m1[byte >> 4]), dim=-1)
    return pair, e8m0_table(dtype, device)


def dequantize_rows_reference(packed: torch.Tensor, scale: torch.Tensor, group_size: int, dtype: torch.dtype) -> torch.Tensor:
    """packed [r, in/2], scale [r, in/g] -> [r, in] in `dtype` (no NaN check)."""
    pair, pow2 = _tables(dtype, packed.device)
    w = pair[packed.long()].flatten(-2)
    s = pow2[scale.long()]
    return (w.unflatten(-1, (-1, group_size)) * s.unsqueeze(-1)).flatten(-2)


def mxfp4_example_weight(out_: int, in_: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Random MXFP4 codes [out, in/2] and finite scales [out, in/32] near 2^0 (a harness example's weight)."""
    g = torch.Generator().manual_seed(seed)
    packed = torch.randint(0, 256, (out_, in_ // 2), dtype=torch.uint8, generator=g)
    return packed, torch.randint(120, 130, (out_, in_ // 32), dtype=torch.uint8, generator=g)


def _dequantize_examples(large: bool) -> list[Example]:
    out_, in_ = (3072, 3584) if large else (7, 96)
    return [Example(f"[{out_}, {in_}]", (*mxfp4_example_weight(out_, in_, 1), 32, torch.float32))]


def _linear_examples(large: bool) -> list[Example]:
    out_, in_ = (3072, 3584) if large else (21, 96)
    packed, scale = mxfp4_example_weight(out_, in_, 1)
    return [Example(f"{n} rows, [{out_}, {in_}]", (randn(n, in_, seed=2), packed, scale)) for n in (1, 5)]


dequantize_rows = register(
    "mxfp4_dequantize", examples=_dequantize_examples, reference=dequantize_rows_reference,
    native=lambda packed, scale, group_size, dtype: native().mxfp4_dequantize(packed, scale),  # one pass in C++
    supports=lambda packed, scale, group_size, dtype: (group_size == 32 and dtype == torch.float32
                                                       and packed.is_contiguous() and scale.is_contiguous()))


def mxfp4_linear_tiled(x: torch.Tensor, packed: torch.Tensor, scale: torch.Tensor, group_size: int = 32,
                           row_tile: int = ROW_TILE) -> torch.Tensor:
    """x [N, in] @ W.T with W given packed ([out, in/2] + [out, in/g]) -> [N, out] in x.dtype.
    Decodes tile by tile and runs a GEMM (compute bound, where decoding is amortised)."""
    out_rows = packed.shape[0]
    if out_rows <= row_tile:
        return x @ dequantize_rows(packed, scale, group_size, x.dtype).T
    y = x.new_empty((x.shape[0], out_rows))
    for r in range(0, out_rows, row_tile):
        w = dequantize_rows(packed[r:r + row_tile], scale[r:r + row_tile], group_size, x.dtype)
        y[:, r:r + row_tile] = x @ w.T
    return y


def _mxfp4_linear_native(x, packed, scale, group_size=32, row_tile=ROW_TILE):
    """Few fp32 rows (decode): codes decoded in registers, each weight byte read once. More (prefill,
    where `prefill_gemm()` is native): the blocked GEMM, decoding each panel of codes as it packs it."""
    if x.shape[0] > MAX_ROWS and prefill_gemm() == "bf16-dot":   # the opt-in that rounds x (ops/dot_linear.py)
        return native().mxfp4_dot_gemm(x.contiguous(), packed, scale)
    if x.shape[0] > MAX_ROWS:
        return native().mxfp4_gemm(x.contiguous(), packed, scale)
    return native().mxfp4_linear(x.contiguous(), packed, scale)


mxfp4_linear = register(
    "mxfp4_linear", examples=_linear_examples, reference=mxfp4_linear_tiled, native=_mxfp4_linear_native,
    supports=lambda x, packed, scale, group_size=32, row_tile=ROW_TILE: (
        group_size == 32 and x.dtype == torch.float32 and x.dim() == 2
        and (x.shape[0] <= MAX_ROWS or prefill_gemm() in ("native", "bf16-dot"))
        and packed.is_contiguous() and scale.is_contiguous()))
