"""The opt-in prefill products on the CPU's bf16 dot-product units (K3_PREFILL_GEMM=bf16-dot): a prefill-sized
product rounds x to bf16 and then sums exactly as its reference does (the kernels themselves are in the op
harness at every level, with and without the dot-product instruction); decode rows and the default stay exact."""

import pytest
import torch

import k3.ops.linear as linear_module
import k3.ops.mxfp4.linear as mxfp4_module
from k3.ops.dot_linear import dot_linear_reference, mxfp4_dot_linear_reference
from k3.ops.mxfp4.linear import mxfp4_example_weight, mxfp4_linear
from k3.ops.native import bf16_dot_units, cpu_flags, native, simd_level
from k3.testing.tolerance import assert_close, rel_l2

pytestmark = pytest.mark.skipif(native() is None, reason="the native kernels did not build")


@pytest.fixture
def dot(monkeypatch):
    for module in (linear_module, mxfp4_module):
        monkeypatch.setattr(module, "prefill_gemm", lambda: "bf16-dot")


def test_prefill_rows_round_x_then_sum_as_the_reference(dot):
    x, w = torch.randn(70, 300), torch.randn(45, 300).bfloat16()
    y = linear_module.linear(x, w)
    assert_close("bf16-dot prefill", y, dot_linear_reference(x, w), 1e-5)
    assert rel_l2(y, linear_module.linear_reference(x, w)) > 1e-5, "x was not rounded: not the bf16-dot product"
    few = x[:3]
    assert torch.equal(linear_module.linear(few, w), linear_module.linear(few, w)) and \
        rel_l2(linear_module.linear(few, w), linear_module.linear_reference(few, w)) < 1e-6, "decode rows stay exact"


def test_mxfp4_prefill_rows_round_x_too(dot):
    x = torch.randn(70, 128)
    packed, scale = mxfp4_example_weight(40, 128, seed=5)
    assert_close("bf16-dot MXFP4 prefill", mxfp4_linear(x, packed, scale),
                 mxfp4_dot_linear_reference(x, packed, scale), 1e-5)


def test_the_dot_product_units_are_read_from_the_cpu():
    assert bf16_dot_units() == (simd_level() >= 2 and "avx512_bf16" in cpu_flags())


def test_an_unknown_prefill_choice_is_refused_by_name(monkeypatch):
    from k3.config import env

    monkeypatch.setenv("K3_PREFILL_GEMM", "amx")
    with pytest.raises(ValueError, match="bf16-dot"):
        env.read("K3_PREFILL_GEMM")
