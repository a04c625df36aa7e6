"""Native CPU kernels against their references: equal up to fp32 summation order, on odd shapes."""

from __future__ import annotations

import contextlib
import subprocess
import sys

import pytest
import torch

from k3.ops.linear import linear
from k3.ops.mxfp4 import dequantize, mxfp4_linear, quantize
from k3.ops.native import cpu_simd_level, simd_level
from k3.testing import assert_close


@pytest.mark.parametrize("rows,out,inp", [(1, 37, 45), (3, 129, 300), (8, 64, 1031), (5, 1, 8)])
def test_bf16_gemv_matches_fp32_reference(kernels, level, rows, out, inp):
    x = torch.randn(rows, inp)
    w = torch.randn(out, inp).bfloat16()
    assert_close("native bf16 linear", kernels.bf16_linear(x, w), x @ w.float().T, 2e-6)


@pytest.mark.parametrize("rows,out,inp", [(1, 37, 64), (4, 129, 320), (8, 7, 3584)])
def test_mxfp4_gemv_matches_dequantised_reference(kernels, level, rows, out, inp):
    g = torch.Generator().manual_seed(rows)
    packed = torch.randint(0, 256, (out, inp // 2), dtype=torch.uint8, generator=g)
    scale = torch.randint(100, 140, (out, inp // 32), dtype=torch.uint8, generator=g)
    x = torch.randn(rows, inp, generator=g)
    assert_close("native mxfp4 linear", kernels.mxfp4_linear(x, packed, scale), x @ dequantize(packed, scale).T, 2e-6)


def test_extreme_scales_stay_exact(kernels, level):
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
def test_fused_expert_matches_the_composed_reference(kernels, level, act, beta, linear_beta):
    from k3.ops.activation import glu

    g = torch.Generator().manual_seed(3)
    dim, inter, rows = 96, 64, 3
    w = {}
    for m, shape in (("w1", (inter, dim)), ("w3", (inter, dim)), ("w2", (dim, inter))):
        w[f"{m}_packed"], w[f"{m}_scale"] = quantize(torch.randn(*shape, generator=g) * 0.3)
    z = torch.randn(rows, dim, generator=g) * 3
    dense = {m: dequantize(w[f"{m}_packed"], w[f"{m}_scale"]) for m in ("w1", "w3", "w2")}
    ref = glu(z @ dense["w1"].T, z @ dense["w3"].T, act, beta, linear_beta) @ dense["w2"].T
    got = kernels.mxfp4_glu_expert(z, [w[f"{m}_{k}"] for m in ("w1", "w3", "w2") for k in ("packed", "scale")],
                                   0 if act == "situ" else 1, beta, linear_beta or 0.0)
    assert_close(f"fused expert {act}", got, ref, 2e-6)


def test_simd_level_follows_the_cpu_flags_and_the_cap(monkeypatch):
    assert cpu_simd_level(set()) == 0
    assert cpu_simd_level({"avx2", "fma"}) == 1
    assert cpu_simd_level({"avx2", "fma", "avx512f", "avx512bw", "avx512vl"}) == 2
    assert cpu_simd_level({"avx512f", "avx512bw", "avx512vl"}) == 0  # the build needs AVX2+FMA first
    monkeypatch.setenv("K3_NATIVE_SIMD", "scalar")
    assert simd_level() == 0
    monkeypatch.setenv("K3_NATIVE_SIMD", "avx9")
    with pytest.raises(ValueError, match="K3_NATIVE_SIMD"):
        simd_level()


def _random_bank(cls, experts: int, g: torch.Generator):
    """A PackedExperts bank (dim 64, inter 96, SiTU) of random MXFP4 experts."""
    bank = cls(experts, 64, 96, 32, "situ", 4.0, 25.0)
    for name, buf in bank.named_buffers():
        rows = buf.shape[1]
        cols = buf.shape[2] * (2 if name.endswith("packed") else 32)
        p, sc = quantize(torch.randn(experts * rows, cols, generator=g) * 0.2)
        buf.copy_((p if name.endswith("packed") else sc).view(buf.shape))
    return bank


def test_moe_token_equals_the_expert_loop_bit_for_bit(kernels, level):
    """The one-call MoE step computes what the per-expert loop computes, in the same order."""
    from k3.layers.experts import ExpertBank, PackedExperts

    g = torch.Generator().manual_seed(5)
    bank = _random_bank(PackedExperts, 6, g)
    z = torch.randn(1, 64, generator=g)
    experts, weights = [0, 2, 5], [0.7, 0.2, 0.1]
    fused = bank.weighted_sum(z, experts, weights, torch.zeros(1, 64))
    loop = ExpertBank.weighted_sum(bank, z, experts, weights, torch.zeros(1, 64))
    assert torch.equal(fused, loop)
    with pytest.raises(RuntimeError, match="out of range"):
        bank.weighted_sum(z, [6], [1.0], torch.zeros(1, 64))


def test_moe_tokens_equals_the_loops_bit_for_bit(kernels, level):
    """Several tokens in one call: each expert used runs once, and every token's sum equals its one-token
    result (and the per-expert loop's), whatever the tokens beside it."""
    from k3.layers.experts import ExpertBank, PackedExperts
    from k3.ops.mxfp4.expert import moe_tokens_reference

    g = torch.Generator().manual_seed(6)
    bank = _random_bank(PackedExperts, 9, g)
    for n in (2, 5, 11):
        z = torch.randn(n, 64, generator=g)
        ids = torch.stack([torch.randperm(9, generator=g)[:3] for _ in range(n)])
        w = torch.rand(n, 3, generator=g)
        fused = bank.routed_sum(z, w, ids)
        assert torch.equal(fused, moe_tokens_reference(z, bank._bank(), ids, w, 32, "situ", 4.0, 25.0))
        assert torch.equal(fused, ExpertBank.routed_sum(bank, z, w, ids))
        for i in range(n):
            order = sorted(zip(ids[i].tolist(), w[i].tolist()))
            one = bank.weighted_sum(z[i:i + 1], [e for e, _ in order], [x for _, x in order], torch.zeros(1, 64))
            assert torch.equal(one[0], fused[i])
    with pytest.raises(RuntimeError, match="out of range"):
        bank.routed_sum(z[:2], w[:2], torch.full((2, 3), 9))


def test_linear_rows_never_depend_on_their_batchmates(kernels, level):
    from k3.ops.linear import linear

    for K in (24, 100, 1100, 2048):   # 1100: spans of 512 columns, a partial span, a lone block (AVX2) and a tail
        w = torch.randn(40, K).bfloat16()
        x = torch.randn(21, K)
        full = linear(x, w)
        for n in (1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 17, 21):   # 5 to 8: AVX-512 spans, beside the tiles of 21
            assert torch.equal(linear(x[:n], w), full[:n]), (K, n)


@pytest.mark.parametrize("transpose", [False, True])
def test_head_linear_matches_einsum(kernels, level, transpose):
    from k3.ops.linear import head_linear

    w = torch.randn(3, 2 * 11, 13).bfloat16()[:, 5:16]  # [3, 11, 13], strided heads, contiguous rows
    x = torch.randn(2, 1, 3, 11 if transpose else 13)
    ref = torch.einsum("bthr,hrc->bthc" if transpose else "bthc,hrc->bthr", x, w.float())
    assert_close(f"head_linear transpose={transpose}", head_linear(x, w, transpose), ref, 2e-6)
    with torch.enable_grad():  # autograd keeps the einsum path
        xg = x.clone().requires_grad_()
        assert_close("head_linear autograd", head_linear(xg, w, transpose), ref, 2e-6)


@pytest.mark.parametrize("rows,J", [(1, 1), (1, 5), (3, 4)])
def test_attn_res_mix_matches_the_reference(kernels, level, rows, J):
    from k3.ops import attnres

    g = torch.Generator().manual_seed(J)
    cands = [torch.randn(rows, 37, generator=g) * (j + 1) for j in range(J)]
    query = torch.randn(37, generator=g)
    got = kernels.attn_res_mix(cands, query, 1e-6)
    with torch.enable_grad():  # the reference path (autograd sees only it)
        ref = attnres.attn_res_mix([c.clone().requires_grad_() for c in cands], query, 1e-6)
    assert_close("attn_res_mix", got, ref.detach(), 2e-6)
    assert_close("attn_res_mix dispatch", attnres.attn_res_mix(cands, query, 1e-6), ref.detach(), 2e-6)


def test_situ_in_place_equals_the_autograd_form():
    from k3.ops.activation import situ_glu

    g, u = torch.randn(5, 33) * 6, torch.randn(5, 33) * 40
    fast = situ_glu(g, u, 4.0, 25.0)
    with torch.enable_grad():
        slow = situ_glu(g.clone().requires_grad_(), u.clone().requires_grad_(), 4.0, 25.0)
    assert torch.equal(fast, slow.detach())
    assert torch.equal(situ_glu(g, u, 1.0, None), g.tanh() * torch.sigmoid(g) * u)


def test_native_dequantize_is_exact(kernels):
    from k3.ops.mxfp4.linear import dequantize_rows

    g = torch.Generator().manual_seed(11)
    packed = torch.randint(0, 256, (7, 48), dtype=torch.uint8, generator=g)
    scale = torch.randint(0, 255, (7, 3), dtype=torch.uint8, generator=g)
    assert torch.equal(kernels.mxfp4_dequantize(packed, scale), dequantize(packed, scale))
    assert torch.equal(dequantize_rows(packed, scale, 32, torch.float32), dequantize(packed, scale))


@pytest.mark.parametrize("K", [96, 416])  # 416: whole 128-column blocks (the VNNI form's) and a group past them
def test_int8_activations_stay_within_the_stated_bound(kernels, K):
    """Opt-in int8 activations: every output within sum_g 2^(s_g-127) * sum_j |E2M1_j| * max|x_g| / 254
    (+ fp32 rounding) of the exact product; off again, the exact path returns."""
    from k3.ops.native import set_int8_activations

    if simd_level() < 1:
        pytest.skip("the int8 path needs AVX2; this CPU runs the exact path only")
    G = K // 32
    g = torch.Generator().manual_seed(9)
    packed = torch.randint(0, 256, (65, K // 2), dtype=torch.uint8, generator=g)
    scale = torch.randint(110, 135, (65, G), dtype=torch.uint8, generator=g)
    x = torch.randn(3, K, generator=g) * torch.logspace(-2, 2, K)  # groups of very different scales
    x[1, :32] = 0  # an all-zero group
    w = dequantize(packed, scale).double()
    exact = x.double() @ w.T
    xg = x.double().abs().view(3, G, 32).amax(-1)                        # [N, groups]
    wg = w.abs().view(65, G, 32).sum(-1)                                  # [O, groups]
    bound = (xg / 254) @ wg.T + 1e-5 * (x.double().abs() @ w.abs().T)    # [N, O]
    assert not set_int8_activations(True)
    try:
        got = kernels.mxfp4_linear(x, packed, scale).double()
    finally:
        assert set_int8_activations(False)
    err = (got - exact).abs()
    assert bool((err <= bound).all()), float((err / bound).max())
    assert float(err.max()) > 0  # it really is the approximate path
    assert_close("exact path again", kernels.mxfp4_linear(x, packed, scale), x @ dequantize(packed, scale).T, 2e-6)


def test_bf16_rows_do_not_depend_on_how_many_share_the_call(kernels, level, gemv_form):
    """Each output is summed in one fixed order whatever the tile: a row alone (read in tiles of eight
    W rows, or W's rows one after another) equals the same row in a batch of any size, bit for bit
    (the engine's batch invariance rests on it)."""
    gen = torch.Generator().manual_seed(11)
    w = torch.randn(37, 301, generator=gen).bfloat16()
    x = torch.randn(9, 301, generator=gen)
    alone = torch.cat([kernels.bf16_linear(x[i:i + 1].contiguous(), w) for i in range(9)])
    for n in (2, 3, 4, 5, 9):   # every tile shape: fours or pairs, the last four, five, three, one
        assert torch.equal(kernels.bf16_linear(x[:n].contiguous(), w), alone[:n]), n


@contextlib.contextmanager
def _default_choice(monkeypatch, choice, variable):
    """Yields choice(vendor, env, level=2): what the cached default `choice` (k3.ops.native) answers on that
    CPU with `variable` set to env (None: unset). The cache is cleared around each question; on exit the
    real CPU and environment come back and the cache is cleared again."""
    from k3.ops import native as native_module

    def ask(vendor, env, level=2):
        monkeypatch.setattr(native_module, "cpu_vendor", lambda: vendor)
        monkeypatch.setattr(native_module, "simd_level", lambda: level)
        if env is None:
            monkeypatch.delenv(variable, raising=False)
        else:
            monkeypatch.setenv(variable, env)
        choice.cache_clear()
        return choice()

    try:
        yield ask
    finally:
        monkeypatch.undo()
        choice.cache_clear()


def test_the_weight_prefetch_hint_follows_the_cpu_and_the_environment(monkeypatch):
    """Non-temporal on AMD with AVX-512 (measured faster on Zen 5), t0 elsewhere; K3_WEIGHT_PREFETCH overrides, and a
    bad value is refused with the allowed ones."""
    from k3.ops.native import weight_prefetch

    with _default_choice(monkeypatch, weight_prefetch, "K3_WEIGHT_PREFETCH") as hint:
        assert hint("AuthenticAMD", None) == "nta"
        assert hint("AuthenticAMD", None, level=1) == "t0", "Zen 3 (AVX2): unmeasured"
        assert hint("GenuineIntel", None) == "t0"
        assert hint("GenuineIntel", "nta") == "nta"
        assert hint("AuthenticAMD", "t0") == "t0"
        with pytest.raises(ValueError, match="K3_WEIGHT_PREFETCH='l2': expected one of nta, t0"):
            hint("AuthenticAMD", "l2")


def test_the_prefetch_hint_leaves_the_results_alone(kernels, level):
    """The hint changes where prefetched lines go, never a sum: decode GEMVs and expert products give the
    same bits under either."""
    gen = torch.Generator().manual_seed(13)
    x, w = torch.randn(1, 300, generator=gen), torch.randn(97, 300, generator=gen).bfloat16()
    packed = torch.randint(0, 256, (37, 128), dtype=torch.uint8, generator=gen)
    scale = torch.randint(118, 130, (37, 8), dtype=torch.uint8, generator=gen)
    xm = torch.randn(1, 256, generator=gen)
    before = kernels.set_prefetch_nta(False)
    try:
        plain = kernels.bf16_linear(x, w), kernels.mxfp4_linear(xm, packed, scale)
        kernels.set_prefetch_nta(True)
        nta = kernels.bf16_linear(x, w), kernels.mxfp4_linear(xm, packed, scale)
    finally:
        kernels.set_prefetch_nta(before)
    assert all(torch.equal(a, b) for a, b in zip(plain, nta))


def test_mxfp4_rows_do_not_depend_on_how_many_share_the_call(kernels, level):
    """Rows of x in fours, then the two or three left, decode each group once, but sum every output as the
    one-row dot does (K = 320: ten groups, so the pairs of groups end on a lone one)."""
    gen = torch.Generator().manual_seed(12)
    packed, scale = quantize(torch.randn(29, 320, generator=gen))
    x = torch.randn(9, 320, generator=gen)
    alone = torch.cat([kernels.mxfp4_linear(x[i:i + 1].contiguous(), packed, scale) for i in range(9)])
    for n in (2, 3, 4, 5, 6, 7, 8, 9):
        assert torch.equal(kernels.mxfp4_linear(x[:n].contiguous(), packed, scale), alone[:n]), n


def test_many_rows_widen_natively_and_equal_the_reference_bit_for_bit(kernels, prefill_gemm_as):
    """With K3_PREFILL_GEMM=torch (the native GEMM's own tests are in test_native_gemm.py)."""
    from k3.ops.linear import linear_reference

    prefill_gemm_as("torch")
    w = (torch.randn(70, 96) * 3).bfloat16()
    assert torch.equal(kernels.bf16_widen(w), w.float())
    for rows in (33, 200):
        x = torch.randn(rows, 96)
        assert torch.equal(linear(x, w), linear_reference(x, w))


def test_subnormals_flushed_on_every_pool_thread_and_restored():
    from k3.ops.subnormal import subnormals_flushed

    torch.set_num_threads(2)
    tiny = torch.full((1 << 20,), 1e-39)  # subnormal in fp32; large enough to run on the pool
    assert (tiny * 1.0).ne(0).all()
    with subnormals_flushed():
        assert (tiny * 1.0).eq(0).all()   # every thread treats the input as zero (DAZ)
        with subnormals_flushed():
            pass
        assert (tiny * 1.0).eq(0).all()   # a nested block leaves the outer one's mode on
    assert (tiny * 1.0).ne(0).all()


@pytest.mark.parametrize("wdtype", [torch.float32, torch.bfloat16])
def test_rms_norm_rows_match_the_reference_and_ignore_batchmates(kernels, level, wdtype):
    from k3.ops.norm import rms_norm, rms_norm_reference

    x, w = torch.randn(5, 203) * 3, torch.randn(203).to(wdtype)
    assert rms_norm.use_native(x, w, 1e-5)
    assert_close("rms_norm", kernels.rms_norm_rows(x, w, 1e-5), rms_norm_reference(x, w, 1e-5), 1e-6)
    alone = kernels.rms_norm_rows(x[2:3].contiguous(), w, 1e-5)
    assert torch.equal(alone[0], kernels.rms_norm_rows(x, w, 1e-5)[2])


@pytest.mark.parametrize("rows", [1, 2, 5, 7])
def test_mxfp4_rows_in_fours_give_the_one_row_bits(kernels, level, rows):
    """Decode's leftover rows of x multiply four rows of W at once (AVX2 and AVX-512): each output must be the
    bits the one-row dot gives (a one-row W never takes that path)."""
    g = torch.Generator().manual_seed(rows)
    packed = torch.randint(0, 256, (23, 96 // 2), dtype=torch.uint8, generator=g)
    scale = torch.randint(110, 135, (23, 96 // 32), dtype=torch.uint8, generator=g)
    x = torch.randn(rows, 96, generator=g)
    alone = torch.cat([kernels.mxfp4_linear(x, packed[o:o + 1], scale[o:o + 1]) for o in range(23)], dim=1)
    assert torch.equal(kernels.mxfp4_linear(x, packed, scale), alone)
