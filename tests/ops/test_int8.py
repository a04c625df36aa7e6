"""int8 trunk weights: the format's guarantees, and the native GEMV against the dequantised reference."""

from __future__ import annotations

import pytest
import torch

from k3.ops.dispatch import REGISTRY, reference_only
from k3.ops.int8 import GROUP, Int8FormatError, check_int8_pair, dequantize, int8_linear, quantize, scale_shape
from k3.testing import assert_close


@pytest.mark.parametrize("out,inp", [(5, 32), (7, 45), (3, 1), (9, 100)])
def test_quantise_bounds_and_exact_dequantisation(out, inp):
    w = torch.randn(out, inp, generator=torch.Generator().manual_seed(inp)) * 0.05
    w[0] = 0                                   # an all-zero row: scale 0, codes 0
    q, s = quantize(w.bfloat16())
    check_int8_pair(q, s)
    assert q.dtype == torch.int8 and s.dtype == torch.bfloat16 and s.shape == scale_shape(out, inp)
    assert int(q.abs().max()) <= 127 and not bool(s[0].float().any())
    per_k = s.float().repeat_interleave(GROUP, 1)[:, :inp]
    amax = torch.nn.functional.pad(w.bfloat16().float().abs(), (0, s.shape[1] * GROUP - inp)).view(out, -1, GROUP).amax(-1)
    assert bool((s.float() >= amax / 127).all()), "a scale rounded below max|w| / 127"
    below = (s.view(torch.int16) - 1).view(torch.bfloat16).float()   # the next bf16 down (positive scales)
    assert bool((below < amax / 127)[1:].all()), "a scale above the smallest bf16 >= max|w| / 127"
    deq = dequantize(q, s)
    assert bool(((deq - w.bfloat16().float()).abs() <= per_k / 2 + 1e-12).all())
    assert torch.equal(deq.double(), q.double() * per_k.double()), "q * scale must be exact in fp32"


def test_quantise_refuses_non_finite_and_non_matrices():
    with pytest.raises(Int8FormatError, match="inf or NaN"):
        quantize(torch.tensor([[1.0, float("inf")]]))
    with pytest.raises(Int8FormatError, match="2-D float"):
        quantize(torch.ones(4))
    q, s = quantize(torch.randn(4, 40))
    with pytest.raises(Int8FormatError, match="do not fit"):
        check_int8_pair(q, s[:, :1])


def _bound(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """What int8_weights.cpp promises per output: x rounded to int16 per group of 32, plus fp32 summation."""
    x64, w64 = x.double(), w.double()
    groups = -(-x.shape[1] // GROUP)
    pad = groups * GROUP - x.shape[1]
    xg = torch.nn.functional.pad(x64.abs(), (0, pad)).view(x.shape[0], groups, GROUP).amax(-1)     # [N, G]
    wg = torch.nn.functional.pad(w64.abs(), (0, pad)).view(w.shape[0], groups, GROUP).sum(-1)      # [O, G]
    return (xg / 65534) @ wg.T + 2e-6 * (x64.abs() @ w64.abs().T)


@pytest.mark.parametrize("rows,out,inp", [(1, 37, 45), (3, 129, 300), (4, 64, 1031), (5, 9, 32), (32, 17, 70)])
def test_int8_gemv_within_its_bound_of_the_dequantised_reference(kernels, level, rows, out, inp):
    g = torch.Generator().manual_seed(rows * out)
    q, s = quantize(torch.randn(out, inp, generator=g))
    x = torch.randn(rows, inp, generator=g) * torch.logspace(-3, 2, inp)    # outliers in x, as in real activations
    w = dequantize(q, s)
    y, ref = kernels.int8_linear(x, q, s), x.double() @ w.double().T
    assert bool(((y.double() - ref).abs() <= _bound(x, w)).all())
    assert torch.equal(kernels.int8_dequantize(q, s), w)


def test_int8_gemv_is_batch_invariant_and_propagates_nan(kernels, level, gemv_form):
    q, s = quantize(torch.randn(21, 77))
    x = torch.randn(6, 77)
    alone = torch.cat([kernels.int8_linear(x[i:i + 1], q, s) for i in range(6)])
    assert torch.equal(kernels.int8_linear(x, q, s), alone)
    x[2, 5] = float("nan")
    y = kernels.int8_linear(x, q, s)
    assert bool(y[2].isnan().all()) and bool(y[[0, 1, 3, 4, 5]].isfinite().all())


def test_op_dispatch_decode_native_prefill_exact():
    q, s = quantize(torch.randn(50, 96))
    assert REGISTRY["int8_linear"].use_native(torch.randn(1, 96), q, s)
    for rows in (1, 8, 33, 40):
        x = torch.randn(rows, 96)
        with reference_only():
            ref = int8_linear(x, q, s)
        got = int8_linear(x, q, s)
        if rows > 32:   # many rows: the native dequantisation feeds the reference's own GEMM
            assert torch.equal(got, ref)
        else:
            assert_close(f"int8 rows={rows}", got, ref, 1e-4)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_native_quantiser_gives_the_reference_bits(kernels, dtype):
    from k3.ops.int8.format import quantize_reference

    g = torch.Generator().manual_seed(7)
    w = torch.randn(67, 101, generator=g) * torch.logspace(-6, 3, 101)   # tiny to large magnitudes
    w[3] = 0
    w[5, :40] = 0                                                         # an all-zero group in a live row
    w[9] = torch.tensor(65504.0 if dtype == torch.float16 else 1e30).expand(101) * torch.sign(w[9])
    w = w.to(dtype)
    assert REGISTRY["int8_quantize"].use_native(w)
    (q, s), (rq, rs) = quantize(w), quantize_reference(w)
    assert torch.equal(q, rq) and torch.equal(s.view(torch.int16), rs.view(torch.int16))
    w[60, 100] = float("nan")
    for fn in (quantize, quantize_reference):
        with pytest.raises(Int8FormatError, match="inf or NaN"):
            fn(w)
