"""KDA's one-token step on state slots in place: native against the reference (gather, short_conv_silu +
l2_norm + recurrent_kda, scatter), and both against the plain composition on dense tensors."""

from __future__ import annotations

import pytest
import torch

from k3.ops.conv import short_conv_silu
from k3.ops.kda import kda_step, kda_step_reference, kda_window, recurrent_kda
from k3.ops.norm import l2_norm
from k3.testing import assert_close

SLOTS, H, K, V, KC = 5, 3, 6, 10, 4   # odd sizes, key and value widths differ


def _inputs(n: int, gen: torch.Generator):
    def rnd(*shape):
        return torch.randn(*shape, generator=gen)

    step = (rnd(n, 1, H * K), rnd(n, 1, H * K), rnd(n, 1, H * V), -torch.rand(n, 1, H, K, generator=gen) * 3,
            torch.rand(n, 1, H, generator=gen), [rnd(H * K, KC), rnd(H * K, KC), rnd(H * V, KC)])
    pools = (rnd(SLOTS, H, K, V), (rnd(SLOTS, KC - 1, H * K), rnd(SLOTS, KC - 1, H * K), rnd(SLOTS, KC - 1, H * V)))
    return step, pools


def _dense(step, rec, tails):
    """The plain composition on gathered tensors."""
    q, k, v, g, beta, weights = step
    n = q.shape[0]
    (q, tq), (k, tk), (v, tv) = (short_conv_silu(x, w, t) for x, w, t in zip((q, k, v), weights, tails))
    q, k = l2_norm(q.view(n, 1, H, K)), l2_norm(k.view(n, 1, H, K))
    o, final = recurrent_kda(q, k, v.view(n, 1, H, V), g, beta, K ** -0.5, rec)
    return o, final, (tq, tk, tv)


@pytest.mark.parametrize("index", [[3], [4, 0, 2], [0, 1, 2, 3, 4]])
def test_native_step_on_slots_matches_reference(kernels, level, index):
    gen = torch.Generator().manual_seed(7 + len(index))
    step, (rec, tails) = _inputs(len(index), gen)
    idx = torch.tensor(index)
    others = [i for i in range(SLOTS) if i not in index]
    expect_o, expect_state, expect_tails = _dense(step, rec[idx].clone(), tuple(t[idx].clone() for t in tails))
    untouched = rec[others].clone(), tuple(t[others].clone() for t in tails)

    pools = {"native": (rec.clone(), tuple(t.clone() for t in tails)), "reference": (rec.clone(), tuple(t.clone() for t in tails))}
    assert kda_step.use_native(*step, *pools["native"], idx, K ** -0.5)
    outs = {"native": kda_step(*step, *pools["native"], idx, K ** -0.5),
            "reference": kda_step_reference(*step, *pools["reference"], idx, K ** -0.5)}
    for name, (r, t) in pools.items():
        assert_close(f"{name} output", outs[name], expect_o, 2e-6)
        assert_close(f"{name} state", r[idx], expect_state, 2e-6)
        for a, e in zip(t, expect_tails):
            assert torch.equal(a[idx], e), f"{name} conv tail"
        assert torch.equal(r[others], untouched[0]), f"{name} wrote a slot outside index"
        assert all(torch.equal(a[others], e) for a, e in zip(t, untouched[1]))


def test_native_step_rejects_bad_shapes_and_repeated_slots(kernels):
    gen = torch.Generator().manual_seed(1)
    (q, k, v, g, beta, w), (rec, tails) = _inputs(2, gen)
    with pytest.raises(RuntimeError, match="twice"):
        kda_step(q, k, v, g, beta, w, rec, tails, torch.tensor([1, 1]), 0.5)
    with pytest.raises(RuntimeError, match="outside the pool"):
        kda_step(q, k, v, g, beta, w, rec, tails, torch.tensor([0, SLOTS]), 0.5)
    with pytest.raises(RuntimeError, match="v must be contiguous fp32"):
        kda_step(q, k, v[..., :-1], g, beta, w, rec, tails, torch.tensor([0, 1]), 0.5)


@pytest.mark.parametrize("v_width, taps", [(32, 4), (144, 4), (48, 3)])
def test_every_instruction_set_gives_the_same_bits(kernels, v_width, taps):
    """The vector forms (taps in channel passes; AVX-512's delta rule in column blocks of 128 and 16 with
    the next head prefetched) against the scalar level's loops: each element's operations in one order,
    so equal bits, on two sequences of a pool whose heads follow one another."""
    from k3.ops.native import simd_level

    gen = torch.Generator().manual_seed(11)
    heads, key = 3, 6
    step = [torch.randn(2, heads * key, generator=gen), torch.randn(2, heads * key, generator=gen),
            torch.randn(2, heads * v_width, generator=gen)]
    weights = [torch.randn(heads * key, taps, generator=gen), torch.randn(heads * key, taps, generator=gen),
               torch.randn(heads * v_width, taps, generator=gen)]
    tails = [torch.randn(SLOTS, taps - 1, heads * key, generator=gen), torch.randn(SLOTS, taps - 1, heads * key, generator=gen),
             torch.randn(SLOTS, taps - 1, heads * v_width, generator=gen)]
    rec = torch.randn(SLOTS, heads, key, v_width, generator=gen)
    g, beta = -torch.rand(2, heads, key, generator=gen) * 3, torch.rand(2, heads, generator=gen)
    idx = torch.tensor([3, 1])
    got = {}
    try:
        for lvl in [lvl for lvl in (0, 1, 2) if lvl <= simd_level()]:
            kernels.set_simd(lvl)
            pools = [t.clone() for t in tails], rec.clone()
            o = kernels.kda_decode_slots(*step, *weights, *pools[0], pools[1], idx, g, beta, key ** -0.5)
            got[lvl] = (o, pools[1], *pools[0])
    finally:
        kernels.set_simd(simd_level())
    for lvl, outs in got.items():
        assert all(torch.equal(a, b) for a, b in zip(outs, got[0])), f"level {lvl} differs from scalar"
    assert not torch.equal(got[0][1], rec), "the state was not updated"


@pytest.mark.parametrize("T", [1, 4])
def test_native_window_equals_its_positions_stepped_in_turn(kernels, level, T):
    """kda_window (one call, each head's state read once) gives the same bits as T kda_step calls, for the
    outputs, the state slots and the conv tails; slots outside the index stay untouched."""
    gen = torch.Generator().manual_seed(11 + T)
    idx, n = torch.tensor([4, 1]), 2
    steps = [_inputs(n, gen)[0] for _ in range(T)]
    window = tuple(torch.cat([s[i] for s in steps], dim=1) for i in range(5)) + (steps[0][5],)
    _, (rec, tails) = _inputs(n, gen)
    pools = {side: (rec.clone(), tuple(t.clone() for t in tails)) for side in ("window", "steps")}
    assert kda_window.use_native(*window, *pools["window"], idx, K ** -0.5)
    out = kda_window(*window, *pools["window"], idx, K ** -0.5)
    expect = torch.cat([kda_step(*s[:5], window[5], *pools["steps"], idx, K ** -0.5) for s in
                        (tuple(x[:, t:t + 1] for x in window[:5]) for t in range(T))], dim=1)
    assert torch.equal(out, expect)
    assert torch.equal(pools["window"][0], pools["steps"][0])
    assert all(torch.equal(a, b) for a, b in zip(pools["window"][1], pools["steps"][1]))
    untouched = [i for i in range(SLOTS) if i not in idx.tolist()]
    assert torch.equal(pools["window"][0][untouched], rec[untouched])


def test_native_window_names_a_bad_shape(kernels):
    gen = torch.Generator().manual_seed(3)
    step, (rec, tails) = _inputs(2, gen)
    q, k, v, g, beta, w = (x.expand(-1, 2, *x.shape[2:]).contiguous() if torch.is_tensor(x) else x for x in step)
    with pytest.raises(RuntimeError, match="must share q's n = 2 and T = 2"):
        kda_window(q, k[:, :1].contiguous(), v, g, beta, w, rec, tails, torch.tensor([0, 1]), 0.5)
