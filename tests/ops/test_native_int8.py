"""The opt-in int8-activation MXFP4 path's AVX-512 VNNI form (mxfp4_int8.h): the same codes and scales as the
AVX2 form, so the same products up to fp32 summation order; a row's result never depends on the rows
beside it; the MoE kernels quantise a token's activations once for all its experts, with the same bits as
quantising them per expert. Shapes are odd on purpose: whole 128-column blocks, a group past the last
block, and W rows past the last four."""

from __future__ import annotations

import pytest
import torch

from k3.ops.mxfp4 import quantize
from k3.ops.native import cpu_flags, set_int8_activations, simd_level
from k3.testing import assert_close

VNNI = simd_level() >= 2 and "avx512_vnni" in cpu_flags()
needs_vnni = pytest.mark.skipif(not VNNI, reason="this CPU lacks AVX-512 VNNI: the int8 path runs its AVX2 form, "
                                                 "tested in test_native.py")


@pytest.fixture
def int8_on():
    assert not set_int8_activations(True)
    yield
    assert set_int8_activations(False)


def random_weights(out: int, inp: int, g: torch.Generator, special: bool = False):
    packed = torch.randint(0, 256, (out, inp // 2), dtype=torch.uint8, generator=g)
    scale = torch.randint(112, 132, (out, inp // 32), dtype=torch.uint8, generator=g)
    if special:  # scale bytes the fast exponent form cannot express: 2^-127 (a whole row, and a group past
        scale[3], scale[66, 12], scale[9, 4] = 0, 0, 255  # the last block) and NaN
    return packed, scale


@needs_vnni
def test_vnni_form_equals_the_avx2_form_up_to_summation_order(kernels, int8_on):
    g = torch.Generator().manual_seed(21)
    packed, scale = random_weights(67, 416, g, special=True)
    x = torch.randn(5, 416, generator=g) * torch.logspace(-1, 1, 416) * 1e30  # 2^-127 x: a normal float
    vnni = kernels.mxfp4_linear(x, packed, scale)
    assert kernels.set_simd(1) == 1
    try:
        avx2 = kernels.mxfp4_linear(x, packed, scale)
    finally:
        kernels.set_simd(simd_level())
    nan = torch.isnan(avx2)
    assert nan.any() and torch.equal(torch.isnan(vnni), nan)   # a NaN scale's row is NaN in both
    finite = ~nan.any(0)
    assert bool((avx2[:, 3] != 0).all())   # row 3 is all 2^-127 scales: small, never zero
    assert_close("VNNI against AVX2 int8, the 2^-127 row", vnni[:, 3], avx2[:, 3], 1e-6)
    assert_close("VNNI against AVX2 int8", vnni[:, finite], avx2[:, finite], 1e-6)


@needs_vnni
def test_vnni_form_propagates_a_nan_activation(kernels, int8_on):
    g = torch.Generator().manual_seed(24)
    packed, scale = random_weights(8, 416, g)
    x = torch.randn(3, 416, generator=g)
    x[1, 200] = float("nan")   # inside a 128-column block
    x[2, 410] = float("nan")   # in the group past the last block
    y = kernels.mxfp4_linear(x, packed, scale)
    assert torch.isfinite(y[0]).all() and torch.isnan(y[1:]).all()


@needs_vnni
def test_vnni_rows_do_not_depend_on_the_rows_beside_them(kernels, int8_on):
    g = torch.Generator().manual_seed(22)
    packed, scale = random_weights(67, 416, g)
    x = torch.randn(5, 416, generator=g)
    batch = kernels.mxfp4_linear(x, packed, scale)
    for i in range(5):
        assert torch.equal(kernels.mxfp4_linear(x[i:i + 1], packed, scale)[0], batch[i])
    for o in (0, 37, 64, 66):   # inside a four, and among the last O % 4 rows
        assert torch.equal(kernels.mxfp4_linear(x, packed[o:o + 1], scale[o:o + 1])[:, 0], batch[:, o])


def test_moe_kernels_quantise_once_with_the_per_expert_bits(kernels, level, int8_on):
    """mxfp4_moe_tokens rounds each token's activations once for all its experts; every token's sum equals
    the one-token kernel's, which rounds them again for each expert."""
    from k3.layers.experts import PackedExperts

    g = torch.Generator().manual_seed(23)
    bank = PackedExperts(7, 288, 160, 32, "situ", 4.0, 25.0)
    for name, buf in bank.named_buffers():
        cols = buf.shape[2] * (2 if name.endswith("packed") else 32)
        p, sc = quantize(torch.randn(7 * buf.shape[1], cols, generator=g) * 0.2)
        buf.copy_((p if name.endswith("packed") else sc).view(buf.shape))
    z = torch.randn(4, 288, generator=g)
    ids = torch.stack([torch.randperm(7, generator=g)[:3] for _ in range(4)])
    w = torch.rand(4, 3, generator=g)
    fused = bank.routed_sum(z, w, ids)
    for i in range(4):
        order = sorted(zip(ids[i].tolist(), w[i].tolist()))
        one = bank.weighted_sum(z[i:i + 1], [e for e, _ in order], [x for _, x in order], torch.zeros(1, 288))
        assert torch.equal(one[0], fused[i])
    set_int8_activations(False)
    exact = bank.routed_sum(z, w, ids)
    set_int8_activations(True)
    if level >= 1:   # the int8 path runs (it needs AVX2): close to the exact sums, not equal
        assert not torch.equal(fused, exact)
        assert_close("int8 against exact", fused, exact, 2e-2)
