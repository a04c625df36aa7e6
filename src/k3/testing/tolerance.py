"""One tolerance helper for every numerical comparison: relative L2 error."""

from __future__ import annotations

import torch


def rel_l2(actual, expected) -> float:
    """||actual - expected|| / ||expected|| in float64 (0 when both are zero)."""
    a = torch.as_tensor(actual).double()
    e = torch.as_tensor(expected).double()
    denom = e.norm().item()
    diff = (a - e).norm().item()
    return diff / denom if denom > 0 else diff


def assert_close(name: str, actual, expected, tol: float) -> float:
    """Fail with the measured relative L2 error when it exceeds `tol`, or when shapes differ or NaNs appear."""
    a, e = torch.as_tensor(actual), torch.as_tensor(expected)
    assert a.shape == e.shape, f"{name}: shape {tuple(a.shape)} != {tuple(e.shape)}"
    assert torch.isfinite(a.double()).all(), f"{name}: non-finite values in result"
    err = rel_l2(a, e)
    assert err <= tol, f"{name}: relative L2 error {err:.3e} > {tol:.1e}"
    return err
