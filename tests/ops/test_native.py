"""Native CPU kernels against their references: equal up to fp32 summation order, on odd shapes."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from k3.ops.linear import linear
from k3.ops.mxfp4 import dequantize, mxfp4_linear, quantize
from k3.ops.native import native
from k3.testing import assert_close


@pytest.fixture(scope="module")
def kernels():
    module = native()
    assert module is not None, "the native kernels failed to build (see the warning)"
    return module


@pytest.mark.parametrize("rows,out,inp", [(1, 37, 45), (3, 129, 300), (8, 64, 1031), (5, 1, 8)])
def test_bf16_gemv_matches_fp32_reference(kernels, rows, out, inp):
    x = torch.randn(rows, inp)
    w = torch.randn(out, inp).bfloat16()
    assert_close("native bf16 linear", kernels.bf16_linear(x, w), x @ w.float().T, 2e-6)


@pytest.mark.parametrize("rows,out,inp", [(1, 37, 64), (4, 129, 320), (8, 7, 3584)])
def test_mxfp4_gemv_matches_dequantised_reference(kernels, rows, out, inp):
    g = torch.Generator().manual_seed(rows)
    packed = torch.randint(0, 256, (out, inp // 2), dtype=torch.uint8, generator=g)
    scale = torch.randint(100, 140, (out, inp // 32), dtype=torch.uint8, generator=g)
    x = torch.randn(rows, inp, generator=g)
    assert_close("native mxfp4 linear", kernels.mxfp4_linear(x, packed, scale), x @ dequantize(packed, scale).T, 2e-6)


def test_extreme_scales_stay_exact(kernels):
    w = torch.zeros(2, 64)
    w[0, 0], w[1, 63] = 6 * 2.0 ** -120, -4 * 2.0 ** 120
    packed, scale = quantize(w)
    x = torch.ones(1, 64)
    assert torch.equal(kernels.mxfp4_linear(x, packed, scale), x @ dequantize(packed, scale).T)


def test_ops_dispatch_to_native_for_few_rows_and_back_for_many():
    w = torch.randn(50, 96).bfloat16()
    for rows in (1, 8, 33, 40):  # 33 and 40 take the cast-and-GEMM path
        x = torch.randn(rows, 96)
        assert_close(f"linear rows={rows}", linear(x, w), x @ w.float().T, 2e-6)
    packed, scale = quantize(torch.randn(33, 96))
    for rows in (1, 40):
        x = torch.randn(rows, 96)
        assert_close(f"mxfp4 rows={rows}", mxfp4_linear(x, packed, scale), x @ dequantize(packed, scale).T, 2e-6)
    x = torch.randn(2, 96, requires_grad=True)
    linear(x, w.float().requires_grad_()).sum().backward()  # training keeps autograd's path
    assert x.grad is not None


def test_disabled_by_environment():
    code = "import os; from k3.ops.native import native; print(native() is None)"
    out = subprocess.run([sys.executable, "-c", code], env={"K3_NATIVE": "0", "PATH": ""}, capture_output=True,
                         text=True, timeout=120)
    assert out.stdout.strip() == "True", out.stderr


@pytest.mark.parametrize("act,beta,linear_beta", [("situ", 4.0, 25.0), ("situ", 1.0, None), ("silu", 1.0, None)])
def test_fused_expert_matches_the_composed_reference(kernels, act, beta, linear_beta):
    from k3.ops.activation import glu

    g = torch.Generator().manual_seed(3)
    dim, inter, rows = 96, 64, 3
    w = {}
    for m, shape in (("w1", (inter, dim)), ("w3", (inter, dim)), ("w2", (dim, inter))):
        w[f"{m}_packed"], w[f"{m}_scale"] = quantize(torch.randn(*shape, generator=g) * 0.3)
    z = torch.randn(rows, dim, generator=g) * 3
    dense = {m: dequantize(w[f"{m}_packed"], w[f"{m}_scale"]) for m in ("w1", "w3", "w2")}
    ref = glu(z @ dense["w1"].T, z @ dense["w3"].T, act, beta, linear_beta) @ dense["w2"].T
    got = kernels.mxfp4_glu_expert(z, *(w[f"{m}_{k}"] for m in ("w1", "w3", "w2") for k in ("packed", "scale")),
                                   0 if act == "situ" else 1, beta, linear_beta or 0.0)
    assert_close(f"fused expert {act}", got, ref, 2e-6)
