"""The tower's ops against their references: the resampled position table (PyTorch's bilinear against the
formula of vision spec §4.3), 2-D rotary embedding (pairs rotated as complex numbers), attention within an
image, the time table and the tower's RMSNorm."""

from __future__ import annotations

import math

import pytest
import torch

from k3.layers.vision_reference import _rotate
from k3.ops.vision import (apply_rope2d, image_attention, image_attention_reference, resample_table,
                           resample_table_reference, rope2d_angles, time_table, tower_rms_norm)
from k3.testing.tolerance import assert_close


@pytest.mark.parametrize("h,w", [(8, 8), (3, 5), (2, 2), (13, 8), (20, 31), (1, 9)])
def test_the_table_resamples_as_the_formula_says(h, w):
    table = torch.randn(8, 8, 6, dtype=torch.float64)
    assert_close(f"resample {h}x{w}", resample_table(table, h, w), resample_table_reference(table, h, w), 1e-12)


def test_a_table_of_the_grid_size_is_used_as_it_is():
    table = torch.randn(4, 6, 3)
    assert torch.equal(resample_table(table, 4, 6), table.reshape(24, 3))


def test_rope2d_turns_columns_on_even_pairs_and_rows_on_odd_pairs():
    h, w, d = 3, 5, 16
    x = torch.randn(h * w, 2, d, dtype=torch.float64)
    angles = rope2d_angles(h, w, d)
    rows = torch.arange(h, dtype=torch.float64).repeat_interleave(w)
    cols = torch.arange(w, dtype=torch.float64).repeat(h)
    expected = _rotate(x, rows, cols)
    assert_close("rope2d", apply_rope2d(x.float(), angles.cos().float(), angles.sin().float()), expected, 1e-6)
    # pair 0 turns by the column alone (f_0 = 1), pair 1 by the row alone
    assert torch.allclose(angles[:, 0], cols) and torch.allclose(angles[:, 1], rows)
    assert angles[:, 2] == pytest.approx(cols * 10000.0 ** (-4 / d))


def test_attention_within_an_image_matches_the_written_out_softmax():
    q, k, v = (torch.randn(37, 3, 16) for _ in range(3))
    assert_close("attention", image_attention(q, k, v), image_attention_reference(q, k, v), 1e-5)


def test_the_time_table_is_sin_then_cos():
    t = time_table(4, 8)
    omega = [10000.0 ** (-k / 4) for k in range(4)]
    for tau in range(4):
        assert t[tau, :4].tolist() == pytest.approx([math.sin(tau * o) for o in omega], abs=1e-6)
        assert t[tau, 4:].tolist() == pytest.approx([math.cos(tau * o) for o in omega], abs=1e-6)


def test_the_tower_norm_is_torch_rmsnorm_with_its_default_epsilon():
    x, g = torch.randn(5, 12) * 1e-3, torch.randn(12)
    norm = torch.nn.RMSNorm(12)           # built without eps, as the reference builds the tower's norms
    norm.weight.data.copy_(g)
    assert_close("norm", tower_rms_norm(x, g, 2.0 ** -23), norm(x), 1e-6)
