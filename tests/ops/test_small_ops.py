import torch
import torch.nn.functional as F

from k3.ops.activation import situ_glu
from k3.ops.attnres import attn_res_mix, attn_res_query
from k3.ops.conv import short_conv_silu
from k3.ops.norm import gated_rms_norm, l2_norm, rms_norm
from k3.ops.routing import sigmoid_topk_route
from k3.testing import assert_close


def test_short_conv_step_by_step_equals_full_sequence():
    x = torch.randn(2, 11, 5, dtype=torch.float64)
    w = torch.randn(5, 4, dtype=torch.float64)
    full, tail = short_conv_silu(x, w)
    state, outs = None, []
    for t in range(11):
        y, state = short_conv_silu(x[:, t:t + 1], w, state)
        outs.append(y)
    assert_close("conv", torch.cat(outs, 1), full, 1e-14)
    assert torch.equal(state, tail) and torch.equal(tail, x[:, -3:])


def test_short_conv_taps_current_token_last():
    x = torch.zeros(1, 4, 1, dtype=torch.float64)
    x[0, 0, 0] = 1.0
    w = torch.tensor([[1.0, 2.0, 3.0, 4.0]], dtype=torch.float64)
    y, _ = short_conv_silu(x, w)
    # An impulse at t=0 meets tap 3 at t=0, tap 2 at t=1, ...
    assert_close("impulse", y[0, :, 0], F.silu(torch.tensor([4.0, 3.0, 2.0, 1.0], dtype=torch.float64)), 1e-15)


def test_attn_res_mix_by_hand():
    a = torch.tensor([[3.0, 0.0]], dtype=torch.float64)
    b = torch.tensor([[0.0, 1.0]], dtype=torch.float64)
    norm, proj = torch.tensor([1.0, 2.0]), torch.tensor([[1.0, 1.0]])
    q = attn_res_query(norm, proj)
    # RMS-normalised a = [sqrt2, 0] -> score sqrt2; b -> [0, sqrt2] -> score 2 sqrt2.
    s = torch.tensor([2 ** 0.5, 2 * 2 ** 0.5], dtype=torch.float64)
    alpha = torch.softmax(s, 0)
    assert_close("mix", attn_res_mix([a, b], q, 0.0), alpha[0] * a + alpha[1] * b, 1e-15)


def test_routing_bias_chooses_but_does_not_weigh():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
    bias = torch.tensor([0.0, 0.0, 0.0, 10.0])
    w, ids = sigmoid_topk_route(logits, bias, 2, True, 1.0)
    assert sorted(ids[0].tolist()) == [0, 3]
    s = torch.sigmoid(logits[0])
    expected = torch.stack([s[i] for i in ids[0]]) / (s[0] + s[3])
    assert_close("weights", w[0], expected, 1e-7)
    w2, _ = sigmoid_topk_route(logits, bias, 2, True, 2.5)
    assert_close("scaling", w2, 2.5 * w, 1e-7)
    w3, _ = sigmoid_topk_route(logits, bias, 2, False, 1.0)
    assert_close("no renorm", w3[0], torch.stack([s[i] for i in ids[0]]), 1e-7)


def test_situ_formula_and_limits():
    g, u = torch.randn(50, dtype=torch.float64) * 10, torch.randn(50, dtype=torch.float64) * 50
    expected = 4 * torch.tanh(g / 4) * torch.sigmoid(g) * 25 * torch.tanh(u / 25)
    assert_close("situ", situ_glu(g, u, 4.0, 25.0), expected, 1e-15)
    assert_close("no linear beta", situ_glu(g, u, 4.0, None), 4 * torch.tanh(g / 4) * torch.sigmoid(g) * u, 1e-15)
    assert_close("large beta -> silu", situ_glu(g, u, 1e6, None), F.silu(g) * u, 1e-9)


def test_norms():
    x = torch.randn(3, 16, dtype=torch.float64)
    w = torch.randn(16, dtype=torch.float64)
    assert_close("rms", rms_norm(x, w, 1e-5), x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w, 1e-15)
    assert_close("l2", l2_norm(x), x / torch.sqrt(x.pow(2).sum(-1, keepdim=True) + 1e-6), 1e-15)
    gate = torch.randn(3, 16, dtype=torch.float64)
    expected = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w * torch.sigmoid(gate)
    assert_close("gated", gated_rms_norm(x, gate, w, 1e-5), expected, 1e-15)
    xb = x.to(torch.bfloat16)
    assert rms_norm(xb, w, 1e-5).dtype == torch.bfloat16


def test_short_conv_tap_sum_equals_conv1d():
    import torch.nn.functional as F

    from k3.ops.conv import conv_taps

    full = torch.randn(2, 3 + 4, 13, dtype=torch.float64)
    w = torch.randn(13, 4, dtype=torch.float64)
    ref = F.conv1d(full.transpose(1, 2), w.unsqueeze(1), groups=13).transpose(1, 2)
    assert torch.allclose(conv_taps(full, w, 4), ref, rtol=1e-12, atol=1e-12)


def test_transcendental_ops_give_each_row_the_same_bits_whatever_the_batch():
    """PyTorch runs a vector form over whole vectors and a scalar form over the tail; padded, every
    element takes the vector form, so a row's result never depends on the rows beside it."""
    from k3.ops.activation import situ_glu, silu_glu
    from k3.ops.elementwise import sigmoid, silu, softplus

    g = torch.Generator().manual_seed(3)
    for D in (3, 24, 37, 101):
        x, y = torch.randn(9, D, generator=g) * 4, torch.randn(9, D, generator=g) * 4
        for name, f in (("sigmoid", sigmoid), ("silu", silu), ("softplus", softplus),
                        ("situ_glu", lambda a, b=None: situ_glu(a, y[:a.shape[0]], 4.0, 25.0)),
                        ("silu_glu", lambda a, b=None: silu_glu(a, y[:a.shape[0]]))):
            full = f(x)
            for n in (1, 2, 5):
                assert torch.equal(f(x[:n]), full[:n]), (name, D, n)
        assert torch.equal(sigmoid(x), torch.sigmoid(x)) or (sigmoid(x) - torch.sigmoid(x)).abs().max() < 1e-6


def test_native_short_conv_matches_the_reference_and_carries_its_state_exactly(kernels):
    """The native prefill convolution (ops/native/kda.cpp) against conv1d at odd sizes, and token by
    token with its state carried it gives the whole sequence's bits (taps summed in one order)."""
    from k3.ops.conv import short_conv_silu_reference
    from k3.ops.dispatch import REGISTRY

    g = torch.Generator().manual_seed(4)
    for T, C, K, with_state in [(1, 5, 4, False), (7, 37, 4, True), (70, 129, 3, True), (33, 8, 2, False)]:
        x, w = torch.randn(2, T, C, generator=g) * 3, torch.randn(C, K, generator=g)
        s0 = torch.randn(2, K - 1, C, generator=g) if with_state else None
        assert REGISTRY["short_conv_silu"].use_native(x, w, s0)
        with torch.inference_mode():
            y, tail = short_conv_silu(x, w, s0)
            y_ref, tail_ref = short_conv_silu_reference(x, w, s0)
            assert_close("conv", y, y_ref, 1e-6)
            assert torch.equal(tail, tail_ref)
            state, outs = s0, []
            for t in range(T):
                yt, state = short_conv_silu(x[:, t:t + 1], w, state)
                outs.append(yt)
        assert torch.equal(torch.cat(outs, 1), y) and torch.equal(state, tail), (T, C, K)
