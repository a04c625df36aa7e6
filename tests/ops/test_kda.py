import math

import pytest
import torch
import torch.nn.functional as F

from k3.ops.dispatch import REGISTRY, reference_only
from k3.ops.kda import chunk_kda, kda_gate, recurrent_kda
from k3.ops.kda.chunk import chunk_kda_reference
from k3.ops.norm import l2_norm
from k3.testing import assert_close


def _inputs(T, dtype, B=2, H=3, K=8, V=6, strong_decay=False):
    q = l2_norm(F.silu(torch.randn(B, T, H, K, dtype=dtype)))
    k = l2_norm(F.silu(torch.randn(B, T, H, K, dtype=dtype)))
    v = torch.randn(B, T, H, V, dtype=dtype)
    raw = torch.randn(B, T, H, K, dtype=dtype) + (4.0 if strong_decay else 0.0)
    g = -5.0 * torch.sigmoid(raw)
    beta = torch.sigmoid(torch.randn(B, T, H, dtype=dtype))
    return q, k, v, g, beta


@pytest.mark.parametrize("T", [1, 63, 64, 65, 130])
@pytest.mark.parametrize("with_state", [False, True], ids=["zero-state", "initial-state"])
def test_chunk_equals_recurrence_fp64(T, with_state):
    q, k, v, g, beta = _inputs(T, torch.float64)
    s0 = torch.randn(2, 3, 8, 6, dtype=torch.float64) if with_state else None
    o_ref, s_ref = recurrent_kda(q, k, v, g, beta, 8 ** -0.5, s0)
    o, s = chunk_kda(q, k, v, g, beta, 8 ** -0.5, s0)
    assert_close("o", o, o_ref, 1e-10)
    assert_close("state", s, s_ref, 1e-10)


def test_chunk_fp32_at_150_tokens_with_gates_near_lower_bound():
    # Gates near -5 drive the in-chunk cumulative log-decay to about -300: exp(-G) would overflow fp32.
    q, k, v, g, beta = _inputs(150, torch.float64, strong_decay=True)
    assert g[:, :64].sum(1).min() < -300
    o_ref, s_ref = recurrent_kda(q, k, v, g, beta, 8 ** -0.5)
    o, s = chunk_kda(*(t.float() for t in (q, k, v, g, beta)), 8 ** -0.5)
    assert_close("o fp32", o, o_ref, 1e-5)
    assert_close("state fp32", s, s_ref, 1e-5)


@pytest.mark.parametrize("gate_scale, factored", [(1.0, True), (40.0, False)], ids=["k3-gates", "steep-gates"])
def test_chunk_diagonal_blocks_both_forms(gate_scale, factored):
    # Gates within K3's lower bound (-5 a token) let the diagonal blocks factor through their middle
    # row as one matmul; steeper ones must take the pairwise exponentials. Both equal the recurrence.
    from k3.ops.kda.chunk import SUB_CHUNK, _diagonal_factors

    q, k, v, g, beta = _inputs(100, torch.float64, strong_decay=True)
    g = g * gate_scale
    o_ref, s_ref = recurrent_kda(q, k, v, g, beta, 8 ** -0.5)
    q32, k32, v32, g32, b32 = (t.float() for t in (q, k, v, g, beta))
    G = g32[:, :64].transpose(1, 2).cumsum(-2)
    assert _diagonal_factors(k32[:, :64].transpose(1, 2), k32[:, :64].transpose(1, 2), G, SUB_CHUNK) is factored
    o, s = chunk_kda_reference(q32, k32, v32, g32, b32, 8 ** -0.5)
    assert_close("o fp32", o, o_ref, 1e-5)
    assert_close("state fp32", s, s_ref, 1e-5)


def test_recurrence_matches_closed_form_single_step():
    # One token from zero state: S = beta k v^T, o = S^T (s q) = beta (s q.k) v.
    q, k, v, g, beta = _inputs(1, torch.float64, B=1, H=1)
    o, S = recurrent_kda(q, k, v, g, beta, 0.5)
    expected = beta[0, 0, 0] * 0.5 * (q[0, 0, 0] @ k[0, 0, 0]) * v[0, 0, 0]
    assert_close("o", o[0, 0, 0], expected, 1e-14)


def test_decay_is_along_the_key_dimension():
    # With a state and zero-beta input, the state's row d must be scaled by exp(g_d).
    B, H, K, V = 1, 1, 4, 3
    s0 = torch.randn(B, H, K, V, dtype=torch.float64)
    g = torch.tensor([-0.1, -1.0, -2.0, -3.0], dtype=torch.float64).view(1, 1, 1, K)
    zeros = torch.zeros(1, 1, 1, K, dtype=torch.float64)
    _, S = recurrent_kda(zeros, zeros, torch.zeros(1, 1, 1, V, dtype=torch.float64), g,
                         torch.zeros(1, 1, 1, dtype=torch.float64), 1.0, s0)
    assert_close("decayed state", S, s0 * torch.exp(g).view(1, 1, K, 1), 1e-15)


def test_gate_forms():
    raw = torch.randn(2, 3, 4, dtype=torch.float64)
    a_log = torch.tensor([0.1, -0.5, 1.0], dtype=torch.float64)
    dt = torch.randn(12, dtype=torch.float64)
    z = raw + dt.view(3, 4)
    a = a_log.exp().view(3, 1)
    assert_close("bounded", kda_gate(raw, a_log, dt, -5.0), -5.0 * torch.sigmoid(a * z), 1e-15)
    assert_close("softplus", kda_gate(raw, a_log, dt, None), -a * F.softplus(z), 1e-15)
    g = kda_gate(raw * 100, a_log, dt, -5.0)
    assert bool(((g > -5.0) | torch.isclose(g, torch.tensor(-5.0, dtype=g.dtype))).all()) and bool((g <= 0).all())
    assert not math.isnan(g.sum().item())


@pytest.mark.parametrize("T", [15, 16, 17, 37])
def test_chunk_gradients_equal_recurrence_gradients_fp64(T):
    torch.manual_seed(T)
    q, k, v, g, beta = (t.requires_grad_() for t in _inputs(T, torch.float64, B=1, H=2, K=4, V=3))
    s0 = torch.randn(1, 2, 4, 3, dtype=torch.float64, requires_grad=True)
    weights = torch.randn(1, T, 2, 3, dtype=torch.float64)

    def loss(core, **kw):
        o, s = core(q, k, v, g, beta, 0.5, s0, **kw)
        return (o * weights).sum() + s.pow(2).sum()

    inputs = (q, k, v, g, beta, s0)
    ref = torch.autograd.grad(loss(recurrent_kda), inputs)
    out = torch.autograd.grad(loss(chunk_kda, chunk_size=16), inputs)
    for name, a, b in zip("q k v g beta s0".split(), out, ref):
        assert_close(f"d{name}", a, b, 1e-10)


def test_chunk_gradcheck():
    q, k, v, g, beta = (t.requires_grad_() for t in _inputs(9, torch.float64, B=1, H=1, K=3, V=2))
    assert torch.autograd.gradcheck(lambda *a: chunk_kda(*a, 0.7, chunk_size=4)[0], (q, k, v, g, beta))


# The native chunked form (ops/native/kda_chunk.cpp) against the recurrence in fp64 and the torch chunked
# form: odd head sizes (vector tails), lengths inside, at and past chunk and sub-block edges, a state to
# continue, K3-like and steep gates (the in-chunk decay reaching -300: every exponential stays <= 0).
@pytest.mark.parametrize("T,K,V,strong,chunk", [(1, 8, 6, False, 64), (17, 37, 19, False, 64), (64, 16, 16, True, 64),
                                                (130, 8, 6, False, 64), (150, 33, 40, True, 64), (70, 9, 5, True, 16)])
def test_native_chunk_equals_the_recurrence_and_the_torch_form(kernels, T, K, V, strong, chunk):
    q, k, v, g, beta = _inputs(T, torch.float64, B=2, H=3, K=K, V=V, strong_decay=strong)
    s0 = torch.randn(2, 3, K, V, dtype=torch.float64)
    o_ref, s_ref = recurrent_kda(q, k, v, g, beta, K ** -0.5, s0)
    f32 = [t.float() for t in (q, k, v, g, beta, s0)]
    assert REGISTRY["kda_chunk"].use_native(*f32[:5], K ** -0.5, f32[5], chunk)
    with torch.inference_mode():
        o, s = chunk_kda(*f32[:5], K ** -0.5, f32[5], chunk_size=chunk)
        o_t, s_t = chunk_kda_reference(*f32[:5], K ** -0.5, f32[5], chunk_size=chunk)
    assert_close("o native", o, o_ref, 2e-6)
    assert_close("state native", s, s_ref, 2e-6)
    assert_close("o native vs torch", o, o_t, 2e-6)
    assert_close("state native vs torch", s, s_t, 2e-6)


def test_native_chunk_sequences_do_not_depend_on_their_batch(kernels):
    q, k, v, g, beta = (t.float() for t in _inputs(90, torch.float64, B=3, H=2, K=12, V=7))
    with torch.inference_mode():
        o, s = chunk_kda(q, k, v, g, beta, 0.3)
        for b in range(3):
            ob, sb = chunk_kda(*(t[b:b + 1] for t in (q, k, v, g, beta)), 0.3)
            assert torch.equal(ob, o[b:b + 1]) and torch.equal(sb, s[b:b + 1]), b


def test_chunk_kda_takes_the_torch_form_for_fp64_autograd_and_reference_only(kernels):
    q, k, v, g, beta = _inputs(20, torch.float64, B=1, H=1)
    assert not REGISTRY["kda_chunk"].use_native(q, k, v, g, beta, 0.5)
    f32 = [t.float() for t in (q, k, v, g, beta)]
    with reference_only():
        assert not REGISTRY["kda_chunk"].use_native(*f32, 0.5)
    f32[0].requires_grad_()
    assert not REGISTRY["kda_chunk"].use_native(*f32, 0.5)
