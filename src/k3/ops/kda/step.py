"""KDA's one-token decode step for n sequences, on the state pools in place (no gather, no scatter copy).

Sequence i lives in slot index[i] of `recurrent` [slots, H, K, V] and of the three conv-tail pools
[slots, K_conv-1, P]; only those slots are read and written. Reference: gather the slots, run
`short_conv_silu` + `l2_norm` + `recurrent_kda`, write the slots back. Native: everything after the
projections in one call on the pools themselves (equal up to fp32 rounding). `k3.ops.dispatch` picks.
"""

from __future__ import annotations

import torch

from k3.ops.conv import short_conv_silu_reference
from k3.ops.dispatch import register
from k3.ops.harness import Example, randn
from k3.ops.kda.reference import recurrent_kda
from k3.ops.native import native
from k3.ops.norm import l2_norm


def kda_step_reference(q, k, v, g, beta, conv_weights, recurrent, tails, index, scale: float) -> torch.Tensor:
    """q, k, v [n, 1, P] (projected, before the convs); g [n, 1, H, K] log-decay; beta [n, 1, H];
    conv_weights 3 x [P, Kc]; recurrent [slots, H, K, V]; tails (q, k, v) each [slots, Kc-1, P];
    index [n] long (distinct slots) -> o [n, 1, H, V] fp32 (or wider); the slots are updated."""
    n, _, H, K = g.shape
    (qc, tq), (kc, tk), (vc, tv) = (short_conv_silu_reference(x, w, t[index]) for x, w, t in zip((q, k, v), conv_weights, tails))
    qc, kc = l2_norm(qc.view(n, 1, H, K)), l2_norm(kc.view(n, 1, H, K))
    o, final = recurrent_kda(qc, kc, vc.view(n, 1, H, -1), g, beta, scale, recurrent[index])
    recurrent.index_copy_(0, index, final.to(recurrent.dtype))
    for pool, new in zip(tails, (tq, tk, tv)):
        pool.index_copy_(0, index, new.to(pool.dtype))
    return o


def _kda_step_native(q, k, v, g, beta, conv_weights, recurrent, tails, index, scale: float) -> torch.Tensor:
    n, _, H, K = g.shape
    o = native().kda_decode_slots(*(x.reshape(n, -1).contiguous() for x in (q, k, v)),
                                  *(w.contiguous() for w in conv_weights), *tails, recurrent, index,
                                  g.reshape(n, H, K).contiguous(), beta.reshape(n, H).contiguous(), scale)
    return o.unsqueeze(1)


def _supports(q, k, v, g, beta, conv_weights, recurrent, tails, index, scale) -> bool:
    pools = (recurrent, *tails)
    return (all(t.dtype == torch.float32 for t in (q, k, v, g, beta, *conv_weights, *pools))
            and all(t.is_contiguous() for t in pools) and index.dtype == torch.long)


def _slot_examples(large: bool, T: int, counts: tuple[int, ...]) -> list[Example]:
    """n sequences (for each n in counts) of T positions on slots of a pool, at K3's head sizes or tiny odd ones."""
    H, K, V, Kc, slots = (96, 128, 128, 4, 4) if large else (2, 5, 7, 4, 5)
    out = []
    for n in counts:
        qkv = [randn(n, T, H * d, seed=i) for i, d in ((1, K), (2, K), (3, V))]
        conv = [randn(H * d, Kc, seed=4 + i, scale=0.5) for i, d in enumerate((K, K, V))]
        tails = [randn(slots, Kc - 1, H * d, seed=7 + i) for i, d in enumerate((K, K, V))]
        g = -torch.rand(n, T, H, K, generator=torch.Generator().manual_seed(10)) * 0.5
        beta = torch.sigmoid(randn(n, T, H, seed=11))
        index = torch.tensor([slots - 1, 0, 2][:n])
        what = "rows" if T == 1 else f"windows of {T}"
        out.append(Example(f"{n} {what}, {H} heads, K {K}, V {V}", (*qkv, g, beta, conv, randn(slots, H, K, V, seed=12),
                                                                     tails, index, K ** -0.5)))
    return out


def _step_examples(large: bool) -> list[Example]:
    return _slot_examples(large, 1, (1, 3))


kda_step = register("kda_step", examples=_step_examples, reference=kda_step_reference, native=_kda_step_native, supports=_supports)


def kda_window_reference(q, k, v, g, beta, conv_weights, recurrent, tails, index, scale: float) -> torch.Tensor:
    """Verify windows: q, k, v [n, T, P], g [n, T, H, K], beta [n, T, H] -> o [n, T, H, V]; position t
    of every sequence stepped as `kda_step` steps one token, in order, on the slots in place."""
    return torch.cat([kda_step_reference(q[:, t:t + 1], k[:, t:t + 1], v[:, t:t + 1], g[:, t:t + 1], beta[:, t:t + 1],
                                         conv_weights, recurrent, tails, index, scale)
                      for t in range(q.shape[1])], dim=1)


def _kda_window_native(q, k, v, g, beta, conv_weights, recurrent, tails, index, scale: float) -> torch.Tensor:
    """All T positions of a layer in one call: each head's state is read once for the window (T one-token
    calls read and write it T times), with the same bits."""
    return native().kda_window_slots(*(x.contiguous() for x in (q, k, v)), *(w.contiguous() for w in conv_weights),
                                     *tails, recurrent, index, g.contiguous(), beta.contiguous(), scale)


def _window_examples(large: bool) -> list[Example]:
    return _slot_examples(large, 3, (1, 2))


kda_window = register("kda_window", examples=_window_examples, reference=kda_window_reference,
                      native=_kda_window_native, supports=_supports)
