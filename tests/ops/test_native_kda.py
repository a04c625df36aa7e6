"""The native one-token KDA step against its reference: short_conv_silu + l2_norm + recurrent_kda."""

from __future__ import annotations

import pytest
import torch

from k3.ops.conv import short_conv_silu
from k3.ops.kda import native_kda_step, recurrent_kda, use_native_kda_step
from k3.ops.native import native
from k3.ops.norm import l2_norm
from k3.testing import assert_close


def reference_step(q, k, v, g, beta, tails, initial, weights, scale):
    b, _, H, K = g.shape
    V = v.shape[-1] // H
    tails = tails or (None, None, None)
    (q, tq), (k, tk), (v, tv) = (short_conv_silu(x, w, t) for x, w, t in zip((q, k, v), weights, tails))
    q, k = l2_norm(q.view(b, 1, H, K)), l2_norm(k.view(b, 1, H, K))
    o, final = recurrent_kda(q, k, v.view(b, 1, H, V), g, beta, scale, initial)
    return o, final, (tq, tk, tv)


@pytest.mark.parametrize("with_state", [True, False])
def test_native_kda_step_matches_reference(with_state):
    assert native() is not None
    gen = torch.Generator().manual_seed(7)
    b, H, K, V, Kc = 2, 3, 6, 10, 4  # odd sizes, key and value widths differ

    def rnd(*shape):
        return torch.randn(*shape, generator=gen)

    q, k, v = rnd(b, 1, H * K), rnd(b, 1, H * K), rnd(b, 1, H * V)
    weights = [rnd(H * K, Kc), rnd(H * K, Kc), rnd(H * V, Kc)]
    g = -torch.rand(b, 1, H, K, generator=gen) * 3
    beta = torch.rand(b, 1, H, generator=gen)
    tails = (rnd(b, Kc - 1, H * K), rnd(b, Kc - 1, H * K), rnd(b, Kc - 1, H * V)) if with_state else None
    initial = rnd(b, H, K, V) if with_state else None
    before = [t.clone() for t in (*(tails or ()), *([initial] if with_state else []))]
    assert use_native_kda_step(q, g)
    got = native_kda_step(q, k, v, g, beta, tails, initial, weights, K ** -0.5)
    ref = reference_step(q, k, v, g, beta, tails, initial, weights, K ** -0.5)
    assert_close("kda step output", got[0], ref[0], 2e-6)
    assert_close("kda step state", got[1], ref[1], 2e-6)
    for name, a, r in zip("qkv", got[2], ref[2]):
        assert torch.equal(a, r), f"conv tail {name}"
    after = [t for t in (*(tails or ()), *([initial] if with_state else []))]
    assert all(torch.equal(x, y) for x, y in zip(before, after)), "the native step wrote its inputs"


def test_native_kda_step_rejects_mismatched_shapes():
    q = torch.randn(1, 1, 12)
    g = -torch.rand(1, 1, 2, 6)
    with pytest.raises(RuntimeError, match="v must be contiguous fp32"):
        native_kda_step(q, q, torch.randn(1, 1, 7), g, torch.rand(1, 1, 2), None, None,
                        [torch.randn(12, 4), torch.randn(12, 4), torch.randn(7, 4)], 0.5)
