"""The sampler's own checks on the model's logits."""

import torch

from k3.engine.sampler import finite_rows


def test_finite_rows_flags_any_nan_or_infinity_in_a_row():
    rows = torch.randn(5, 37)
    rows[1, 3] = float("nan")
    rows[2, 36] = float("inf")
    rows[3, 0] = float("-inf")
    rows[4] = 3e38     # large but finite
    assert finite_rows(rows).tolist() == [True, False, False, False, True]
    assert finite_rows(rows).tolist() == torch.isfinite(rows).all(dim=-1).tolist()
