"""The native blocked GEMM for prefill-sized products (gemm.cpp): against fp64 references at odd sizes
(row, column and depth tails), each row independent of its batch, and the ops' dispatch to it."""

from __future__ import annotations

import pytest
import torch

from k3.ops.linear import linear, linear_reference
from k3.ops.mxfp4 import dequantize
from k3.ops.mxfp4.linear import mxfp4_linear, mxfp4_linear_tiled
from k3.ops.native import MAX_ROWS, native, prefill_gemm, simd_level
from k3.testing import assert_close

# (rows, depth, outputs): rows past and below the 6-row (AVX2) and 12-row (AVX-512) tiles, outputs past
# and below the 16- and 32-wide panels, depths inside one 256-block, across blocks, and with a tail the
# vector packing leaves to scalar code.
SHAPES = [(1, 7, 1), (5, 301, 17), (7, 16, 15), (13, 513, 45), (40, 260, 33), (25, 96, 70)]


def _reference(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return (x.double() @ w.double().T).float()


@pytest.mark.parametrize("rows,depth,outs", SHAPES)
def test_bf16_gemm_matches_the_fp64_product(kernels, level, rows, depth, outs):
    g = torch.Generator().manual_seed(rows * depth)
    x, w = torch.randn(rows, depth, generator=g), torch.randn(outs, depth, generator=g).bfloat16()
    assert_close("bf16_gemm", kernels.bf16_gemm(x, w), _reference(x, w.float()), 2e-6)


@pytest.mark.parametrize("rows,depth,outs", [(1, 32, 1), (7, 96, 17), (13, 544, 45), (40, 256, 33)])
def test_mxfp4_gemm_matches_the_dequantised_fp64_product(kernels, level, rows, depth, outs):
    g = torch.Generator().manual_seed(rows + depth)
    packed = torch.randint(0, 256, (outs, depth // 2), dtype=torch.uint8, generator=g)
    scale = torch.randint(100, 140, (outs, depth // 32), dtype=torch.uint8, generator=g)
    x = torch.randn(rows, depth, generator=g)
    assert_close("mxfp4_gemm", kernels.mxfp4_gemm(x, packed, scale), _reference(x, dequantize(packed, scale)), 2e-6)


def test_mxfp4_gemm_decodes_extreme_scales_and_every_code_exactly(kernels, level):
    codes = torch.arange(256, dtype=torch.uint8).reshape(16, 16)          # every byte: all 16 x 16 code pairs
    packed = torch.cat([codes, codes], 1)                                 # [16, 32]: K = 64, two groups
    scale = torch.tensor([[3, 252]] * 8 + [[127, 128]] * 8, dtype=torch.uint8)   # 6 * 2^125: the largest finite
    for col in range(64):                                                 # one-hot rows of x read one weight each
        x = torch.zeros(1, 64)
        x[0, col] = 1.0
        assert torch.equal(kernels.mxfp4_gemm(x, packed, scale)[0], dequantize(packed, scale)[:, col]), col


def test_a_row_never_depends_on_its_batch_or_the_other_outputs(kernels, level):
    g = torch.Generator().manual_seed(3)
    x, w = torch.randn(23, 300, generator=g), torch.randn(37, 300, generator=g).bfloat16()
    full = kernels.bf16_gemm(x, w)
    for n in (1, 5, 6, 13):
        assert torch.equal(kernels.bf16_gemm(x[:n].contiguous(), w), full[:n]), n
    assert torch.equal(kernels.bf16_gemm(x, w[5:22].contiguous()), full[:, 5:22])


@pytest.mark.skipif(simd_level() < 2, reason="this CPU has no AVX-512: only one vector tile to run")
@pytest.mark.parametrize("rows,depth,outs", SHAPES)
def test_the_avx512_tile_gives_the_avx2_tiles_bits(kernels, rows, depth, outs):
    """One FMA chain per output and depth block in both tiles: the instruction set never changes a bit."""
    g = torch.Generator().manual_seed(rows + outs)
    x, w = torch.randn(rows, depth, generator=g), torch.randn(outs, depth, generator=g).bfloat16()
    packed = torch.randint(0, 256, (outs, depth // 32 * 16), dtype=torch.uint8, generator=g)
    scale = torch.randint(110, 140, (outs, depth // 32), dtype=torch.uint8, generator=g)
    xm = x[:, :depth // 32 * 32].contiguous()
    try:
        kernels.set_simd(1)
        avx2 = kernels.bf16_gemm(x, w), kernels.mxfp4_gemm(xm, packed, scale)
        kernels.set_simd(2)
        avx512 = kernels.bf16_gemm(x, w), kernels.mxfp4_gemm(xm, packed, scale)
    finally:
        kernels.set_simd(simd_level())
    assert torch.equal(avx2[0], avx512[0]) and torch.equal(avx2[1], avx512[1])


def test_an_empty_depth_gives_zeros(kernels, level):
    y = kernels.bf16_gemm(torch.randn(3, 0), torch.randn(4, 0).bfloat16())
    assert torch.equal(y, torch.zeros(3, 4))
    empty = torch.zeros(4, 0, dtype=torch.uint8)
    assert torch.equal(kernels.mxfp4_gemm(torch.randn(3, 0), empty, empty), torch.zeros(3, 4))


def test_bad_shapes_are_refused_with_the_reason(kernels):
    with pytest.raises(RuntimeError, match="contiguous bf16"):
        kernels.bf16_gemm(torch.randn(3, 8), torch.randn(4, 8))
    with pytest.raises(RuntimeError, match="x must be"):
        kernels.bf16_gemm(torch.randn(3, 9), torch.randn(4, 8).bfloat16())
    with pytest.raises(RuntimeError, match="packed/scale shapes"):
        kernels.mxfp4_gemm(torch.randn(3, 64), torch.zeros(4, 32, dtype=torch.uint8), torch.zeros(4, 1, dtype=torch.uint8))


@pytest.mark.parametrize("choice", ["native", "torch"])
def test_prefill_products_take_the_chosen_gemm(prefill_gemm_as, choice):
    prefill_gemm_as(choice)
    g = torch.Generator().manual_seed(5)
    x, w = torch.randn(MAX_ROWS + 9, 96, generator=g), torch.randn(50, 96, generator=g).bfloat16()
    packed = torch.randint(0, 256, (33, 48), dtype=torch.uint8, generator=g)
    scale = torch.randint(110, 135, (33, 3), dtype=torch.uint8, generator=g)
    with torch.inference_mode():
        if choice == "native":
            assert torch.equal(linear(x, w), native().bf16_gemm(x, w))
            assert torch.equal(mxfp4_linear(x, packed, scale), native().mxfp4_gemm(x, packed, scale))
        else:   # the reference's own GEMM on a natively widened weight: the reference's bits
            assert torch.equal(linear(x, w), linear_reference(x, w))
            assert torch.equal(mxfp4_linear(x, packed, scale), mxfp4_linear_tiled(x, packed, scale))


def test_the_default_is_native_wherever_the_kernels_have_vector_code(prefill_gemm_as):
    """Measured faster than MKL's sgemm on AMD (AVX2 and AVX-512) and Intel (AVX-512) CPUs alike; torch
    where the kernels would run their plain C++ loops."""
    prefill_gemm_as(None)
    assert prefill_gemm() == ("native" if simd_level() >= 1 else "torch")


def test_an_unknown_prefill_gemm_is_refused(prefill_gemm_as):
    prefill_gemm_as("blas")
    with pytest.raises(ValueError, match="K3_PREFILL_GEMM='blas'"):
        prefill_gemm()
