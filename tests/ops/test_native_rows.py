"""The decode-row kernels that replace chains of small ATen ops: each against its reference, on odd
sizes, at every instruction set; each row independent of its batchmates; the dispatch choosing them outside
autograd, for decode rows only (AttnRes and the GLU also take prefill's, split over threads)."""

from __future__ import annotations

import pytest
import torch

from k3.ops.attnres import attn_res, attn_res_reference
from k3.ops.dispatch import reference_only
from k3.ops.kda import kda_gates
from k3.ops.kda.gate import kda_gates_reference
from k3.ops.native import MAX_ROWS
from k3.ops.norm import gated_rms_norm, gated_rms_norm_reference
from k3.testing import assert_close


@pytest.mark.parametrize("bounded", [True, False])
@pytest.mark.parametrize("rows", [1, 3])
def test_kda_gates_rows_match_the_reference(kernels, level, bounded, rows):
    g = torch.Generator().manual_seed(rows)
    H, D = 3, 37
    raw, b = torch.randn(rows, H, D, generator=g) * 4, torch.randn(rows, H, generator=g) * 3
    a_log, dt_bias = torch.randn(H, generator=g), torch.randn(H * D, generator=g)
    raw[0, 0, :3] = torch.tensor([30.0, -30.0, 0.0])   # softplus's linear branch and both saturations
    lower = -5.0 if bounded else None
    assert kda_gates.use_native(raw, b, a_log, dt_bias, lower)
    got_g, got_beta = kda_gates(raw, b, a_log, dt_bias, lower)
    ref_g, ref_beta = kda_gates_reference(raw, b, a_log, dt_bias, lower)
    assert_close("kda gate", got_g, ref_g, 1e-6)
    assert_close("kda beta", got_beta, ref_beta, 1e-6)
    alone_g, alone_beta = kda_gates(raw[-1:], b[-1:], a_log, dt_bias, lower)
    assert torch.equal(alone_g[0], got_g[-1]) and torch.equal(alone_beta[0], got_beta[-1])


def test_gated_rms_norm_rows_match_the_reference(kernels, level):
    g = torch.Generator().manual_seed(0)
    o, gate = torch.randn(3, 5, 41, generator=g) * 2, torch.randn(3, 5, 41, generator=g) * 3
    w = torch.randn(41, generator=g)
    assert gated_rms_norm.use_native(o, gate, w, 1e-5)
    got = gated_rms_norm(o, gate, w, 1e-5)
    assert_close("gated rms norm", got, gated_rms_norm_reference(o, gate, w, 1e-5), 1e-6)
    assert torch.equal(gated_rms_norm(o[1:2], gate[1:2], w, 1e-5)[0], got[1])


@pytest.mark.parametrize("wdtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("J", [1, 4])
def test_attn_res_forms_its_query_from_the_weights(kernels, level, wdtype, J):
    g = torch.Generator().manual_seed(J)
    cands = [torch.randn(2, 53, generator=g) * (j + 1) for j in range(J)]
    norm, proj = torch.randn(53, generator=g).to(wdtype), torch.randn(1, 53, generator=g).to(wdtype)
    assert attn_res.use_native(cands, norm, proj, 1e-6)
    got = attn_res(cands, norm, proj, 1e-6)
    assert_close("attn_res", got, attn_res_reference(cands, norm, proj, 1e-6), 2e-6)
    assert torch.equal(attn_res([c[1:] for c in cands], norm, proj, 1e-6)[0], got[1])


def test_row_kernels_stay_off_for_prefill_and_autograd(kernels):
    many = MAX_ROWS + 1
    raw, b = torch.randn(many, 2, 8), torch.randn(many, 2)
    assert not kda_gates.use_native(raw, b, torch.zeros(2), torch.zeros(16), -5.0)
    o = torch.randn(2, 3, 8, requires_grad=True)
    with torch.enable_grad():
        assert not gated_rms_norm.use_native(o, torch.randn(2, 3, 8), torch.ones(8), 1e-5)
        out = gated_rms_norm(o, torch.randn(2, 3, 8), torch.ones(8), 1e-5)
    out.sum().backward()
    assert o.grad is not None and o.grad.abs().sum() > 0
    cands = [torch.randn(many, 8, requires_grad=True)]
    with torch.enable_grad():
        assert not attn_res.use_native(cands, torch.ones(8), torch.ones(1, 8), 1e-6)


def test_attn_res_on_prefill_rows_matches_the_reference_and_ignores_batchmates(kernels):
    """Prefill's AttnRes mixes run natively too, rows over threads; each row is summed alone."""
    g = torch.Generator().manual_seed(9)
    cands = [torch.randn(300, 77, generator=g) * (j + 1) for j in range(4)]
    norm, proj = torch.randn(77, generator=g).bfloat16(), torch.randn(1, 77, generator=g).bfloat16()
    assert attn_res.use_native(cands, norm, proj, 1e-6)
    got = attn_res(cands, norm, proj, 1e-6)
    with reference_only():
        ref = attn_res_reference(cands, norm, proj, 1e-6)
    assert_close("attn_res prefill", got, ref, 2e-6)
    for row in (0, 150, 299):
        assert torch.equal(attn_res([c[row:row + 1] for c in cands], norm, proj, 1e-6)[0], got[row]), row


def test_row_kernels_refuse_bad_shapes_with_a_message(kernels):
    with pytest.raises(RuntimeError, match="dt_bias"):
        kernels.kda_gates_rows(torch.randn(1, 10), torch.randn(1, 3), torch.zeros(3), torch.zeros(10), True, -5.0)
    with pytest.raises(RuntimeError, match="gate must be"):
        kernels.gated_rms_norm_rows(torch.randn(2, 8), torch.randn(2, 7), torch.ones(8), 1e-5)
    with pytest.raises(RuntimeError, match="norm and proj"):
        kernels.attn_res_mix_weights([torch.randn(1, 8)], torch.ones(7), torch.ones(8), 1e-6)


@pytest.mark.parametrize("biased,renormalize,k", [(True, True, 3), (False, True, 1), (True, False, 4)])
def test_moe_route_rows_choose_and_weigh_as_the_reference(kernels, biased, renormalize, k):
    from k3.ops.routing import sigmoid_topk_route, sigmoid_topk_route_reference

    g = torch.Generator().manual_seed(k)
    logits = torch.randn(3, 13, generator=g) * 2
    bias = torch.randn(13, generator=g) * 0.3 if biased else None
    assert sigmoid_topk_route.use_native(logits, bias, k, renormalize, 2.5)
    weights, ids = sigmoid_topk_route(logits, bias, k, renormalize, 2.5)
    ref_w, ref_ids = sigmoid_topk_route_reference(logits, bias, k, renormalize, 2.5)
    assert torch.equal(ids, ref_ids), "the same experts, in the same (descending) order"
    assert_close("routing weights", weights, ref_w, 1e-6)
    alone_w, alone_ids = sigmoid_topk_route(logits[1:2], bias, k, renormalize, 2.5)
    assert torch.equal(alone_ids[0], ids[1]) and torch.equal(alone_w[0], weights[1])


def test_moe_route_rows_break_ties_by_the_lower_expert(kernels):
    weights, ids = kernels.moe_route_rows(torch.zeros(1, 6), torch.zeros(0), 3, True, 1.0)
    assert ids.tolist() == [[0, 1, 2]] and torch.allclose(weights, torch.full((1, 3), 1 / 3))
    with pytest.raises(RuntimeError, match="top_k"):
        kernels.moe_route_rows(torch.zeros(1, 6), torch.zeros(0), 7, True, 1.0)


@pytest.mark.parametrize("act,linear_beta", [("situ", 3.0), ("situ", None), ("silu", None)])
def test_glu_rows_match_the_reference(kernels, level, act, linear_beta):
    from k3.ops.activation import glu, glu_reference

    g = torch.Generator().manual_seed(7)
    gate, up = torch.randn(3, 203, generator=g) * 5, torch.randn(3, 203, generator=g) * 5
    gate[0, :4] = torch.tensor([0.0, 1e-6, -90.0, 90.0])   # the polynomial's small branch and the clamps
    assert glu.use_native(gate, up, act, 2.0, linear_beta)
    got = glu(gate, up, act, 2.0, linear_beta)
    assert_close("glu", got, glu_reference(gate, up, act, 2.0, linear_beta), 1e-6)
    assert torch.isfinite(got).all()
    assert torch.equal(glu(gate[2:], up[2:], act, 2.0, linear_beta)[0], got[2])


def test_glu_on_prefill_rows_is_split_over_threads_with_the_same_bits(kernels):
    """Prefill-sized inputs run in spans over threads; every element is computed alone, so a row's
    result equals the row alone, and the whole equals the reference up to tanh's and exp's last bits."""
    from k3.ops.activation import glu, glu_reference

    g = torch.Generator().manual_seed(8)
    gate, up = torch.randn(97, 1031, generator=g) * 4, torch.randn(97, 1031, generator=g) * 4
    assert glu.use_native(gate, up, "situ", 2.0, 3.0)
    got = glu(gate, up, "situ", 2.0, 3.0)
    assert_close("glu", got, glu_reference(gate, up, "situ", 2.0, 3.0), 1e-6)
    for row in (0, 50, 96):
        assert torch.equal(glu(gate[row:row + 1], up[row:row + 1], "situ", 2.0, 3.0)[0], got[row]), row


@pytest.mark.parametrize("act,linear_beta", [("situ", 3.0), ("silu", 0.0)])
def test_glu_gives_the_same_bits_at_every_vector_width(kernels, act, linear_beta):
    """The activations are lane-wise: AVX-512's 16 lanes give AVX2's 8-lane bits (tails included)."""
    from k3.ops.native import simd_level

    if simd_level() < 2:
        pytest.skip("this CPU has no AVX-512: one vector width to compare")
    g = torch.Generator().manual_seed(9)
    gate, up = torch.randn(2, 1037, generator=g) * 6, torch.randn(2, 1037, generator=g) * 6
    gate[0, :4] = torch.tensor([0.0, 1e-6, -90.0, 90.0])
    code = 0 if act == "situ" else 1
    try:
        got = {}
        for level in (1, 2):
            kernels.set_simd(level)
            got[level] = kernels.glu_rows(gate, up, code, 2.0, linear_beta)
    finally:
        kernels.set_simd(simd_level())
    assert torch.equal(got[1], got[2])
