"""The int8 trunk format: q int8 [out, in] and scale bf16 [out, ceil(in / 32)]; w = q * scale per group.

compressed-tensors' int-quantized layout (`weight`, `weight_scale`; symmetric, group strategy, no zero
point), with two choices of ours: a short last group when `in` is not a multiple of 32 (so any
matrix quantises), and each scale rounded *up* to the next bf16 above max|w| / 127. The scale is then
stored exactly as the quantiser used it, no code leaves [-127, 127], and q * scale (8 bits times 8) is
exact in fp32: the dequantised matrix is the same bits in every path.
"""

from __future__ import annotations

import torch

from k3.config.model import INT8_GROUP as GROUP   # the checkpoint layout's constant, so the two agree
from k3.ops.dispatch import register
from k3.ops.harness import Example, randn
from k3.ops.native import native


class Int8FormatError(ValueError):
    pass


def scale_shape(out: int, inp: int) -> tuple[int, int]:
    return out, -(-inp // GROUP)


def _grouped(w: torch.Tensor) -> torch.Tensor:
    """[out, in] -> [out, groups, 32] fp32, the short last group padded with zeros."""
    out, inp = w.shape
    groups = scale_shape(out, inp)[1]
    padded = torch.nn.functional.pad(w.float(), (0, groups * GROUP - inp))
    return padded.view(out, groups, GROUP)


def _bf16_at_least(s: torch.Tensor) -> torch.Tensor:
    """fp32 s >= 0 -> the smallest bf16 >= s (bf16 bits of positive values order as integers)."""
    b = s.to(torch.bfloat16)
    low = b.float() < s
    bits = b.view(torch.int16)
    return torch.where(low, bits + 1, bits).view(torch.bfloat16)


BLOCK = 2 ** 20   # elements quantised at a time: a matrix's fp32 temporaries stay a few MB, not 5x its size


def _check_matrix(w: torch.Tensor) -> None:
    if w.dim() != 2 or not w.dtype.is_floating_point:
        raise Int8FormatError(f"int8 quantisation takes a 2-D float matrix, got {w.dtype}{list(w.shape)}")


def quantize_reference(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """w [out, in] float -> (q int8 [out, in], scale bf16 [out, ceil(in / 32)]), a block of rows at a time."""
    _check_matrix(w)
    out, inp = w.shape
    q = torch.empty((out, inp), dtype=torch.int8, device=w.device)
    scale = torch.empty(scale_shape(out, inp), dtype=torch.bfloat16, device=w.device)
    rows = max(1, BLOCK // max(1, inp))
    for r in range(0, out, rows):
        q[r:r + rows], scale[r:r + rows] = _quantize_rows(w[r:r + rows])
    return q, scale


def _quantize_native(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The same codes and scales from one pass of native code (no temporaries; about 10x the reference)."""
    _check_matrix(w)
    q = torch.empty(w.shape, dtype=torch.int8)
    scale = torch.empty(scale_shape(*w.shape), dtype=torch.bfloat16)
    if not native().int8_quantize_into(w.contiguous(), q, scale):
        raise Int8FormatError(NON_FINITE)
    return q, scale


NON_FINITE = "the matrix holds inf or NaN: int8 quantisation needs finite weights"

def _quantize_examples(large: bool) -> list[Example]:
    out_, in_ = (2048, 7168) if large else (19, 70)
    return [Example(f"[{out_}, {in_}] {dtype}", (randn(out_, in_, seed=1, dtype=dtype),))
            for dtype in (torch.float32, torch.bfloat16)]


quantize = register("int8_quantize", examples=_quantize_examples, reference=quantize_reference, native=_quantize_native,
                    supports=lambda w: w.dim() == 2 and w.dtype in (torch.bfloat16, torch.float16, torch.float32))


def _quantize_rows(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    g = _grouped(w)
    if not torch.isfinite(g).all():
        raise Int8FormatError(NON_FINITE)
    scale = _bf16_at_least(g.abs().amax(-1) / 127)
    s = scale.float().unsqueeze(-1)
    q = torch.where(s > 0, torch.round(g / torch.where(s > 0, s, 1)), 0).clamp(-127, 127).to(torch.int8)
    return q.view(w.shape[0], -1)[:, :w.shape[1]], scale


def check_int8_pair(q: torch.Tensor, scale: torch.Tensor, name: str = "weight") -> None:
    if q.dtype != torch.int8 or scale.dtype != torch.bfloat16:
        raise Int8FormatError(f"{name}: int8 weights need int8 codes and bf16 scales, got {q.dtype}/{scale.dtype}")
    if q.dim() != 2 or tuple(scale.shape) != scale_shape(*q.shape):
        raise Int8FormatError(f"{name}: scales {list(scale.shape)} do not fit codes {list(q.shape)} "
                              f"(expected {list(scale_shape(*q.shape))}, one per {GROUP} inputs)")


def check_int8_scales(scale: torch.Tensor, name: str = "weight_scale") -> None:
    """Scales from a checkpoint: bf16, finite and >= 0 (a corrupt shard shows up here, not as NaN logits)."""
    if scale.dtype != torch.bfloat16:
        raise Int8FormatError(f"{name}: int8 scales are bf16, got {scale.dtype}")
    bad = ~torch.isfinite(scale) | (scale < 0)
    if bool(bad.any()):
        raise Int8FormatError(f"{name}: {int(bad.sum())} scale(s) are negative, inf or NaN; the checkpoint is "
                              "corrupt - re-run k3 quantize --trunk int8 (or re-download it)")


def dequantize(q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """(q [out, in], scale [out, groups]) -> w [out, in] in `dtype` (exact in fp32)."""
    out, inp = q.shape
    w = scale.float().repeat_interleave(GROUP, dim=1)[:, :inp] * q.float()
    return w.to(dtype)
