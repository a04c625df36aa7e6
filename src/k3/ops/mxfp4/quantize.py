"""Quantise float weights to MXFP4 (E2M1 codes + one E8M0 scale per 32 inputs), for exporting trained
models and `k3 quantize`.

Scale per group: 2^ceil(log2(amax / 6)), so the largest magnitude lands on or under E2M1's 6 and
nothing clips (OCP's floor(log2 amax) - 2 rule can clip values in (6, 8) x scale to 6; both rules
pick the same scale when a group's largest code is 4 or 6, as in QAT-trained weights). Each value
rounds to the nearest E2M1 grid point, ties to the even code (round-to-nearest-even).

MXFP4 encodings are not unique (3 x 2^s equals 6 x 2^(s-1)). This quantiser's output is canonical -
a group whose largest code rounded to 3 is re-expressed at half the scale, so every group's largest
magnitude is 4 or 6 - and quantising its own dequantised output returns the same bytes.
"""

from __future__ import annotations

import torch

from k3.ops.mxfp4.format import E8M0_BIAS, e2m1_table, pack_codes

E2M1_MAX = 6.0
# Magnitude code of twice each value 0, 0.5, 1, 1.5, 2, 3 (codes 0..5; 4 and 6 have no double on the grid).
DOUBLED_CODE = (0, 2, 4, 5, 6, 7, 7, 7)


def nearest_e2m1(mag: torch.Tensor) -> torch.Tensor:
    """mag [...] float64 in [0, 6] -> magnitude codes 0..7, nearest grid value, ties to the even code."""
    grid = e2m1_table(torch.float64, mag.device)[:8]
    hi = torch.searchsorted(grid, mag.contiguous()).clamp(1, 7)
    lo = hi - 1
    d_lo, d_hi = mag - grid[lo], grid[hi] - mag
    take_hi = (d_hi < d_lo) | ((d_hi == d_lo) & (hi % 2 == 0))
    return torch.where(take_hi, hi, lo)


def quantize(w: torch.Tensor, group_size: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    """w [out, in] float (in divisible by group_size) -> (packed [out, in/2] uint8, scale [out, in/g] uint8)."""
    out, inp = w.shape
    if inp % group_size or inp % 2:
        raise ValueError(f"MXFP4 needs the input width ({inp}) to be a multiple of {group_size}")
    groups = w.detach().double().reshape(out, inp // group_size, group_size)
    if not bool(torch.isfinite(groups).all()):
        raise ValueError("cannot quantise a weight holding NaN or inf")
    amax = groups.abs().amax(-1)
    exp = torch.ceil(torch.log2(amax.clamp_min(1e-300) / E2M1_MAX))
    exp = torch.where(amax > 0, exp, torch.full_like(exp, -E8M0_BIAS)).clamp(-E8M0_BIAS, 254 - E8M0_BIAS)
    scaled = groups / torch.exp2(exp).unsqueeze(-1)
    mag = nearest_e2m1(scaled.abs().clamp_max(E2M1_MAX))
    mag, exp = _canonical(mag, exp)
    # -0 becomes +0: the sign bit of a zero code carries nothing.
    codes = torch.where(mag == 0, mag, mag + 8 * (scaled < 0).long())
    return pack_codes(codes.reshape(out, inp)), (exp + E8M0_BIAS).to(torch.uint8)


def _canonical(mag: torch.Tensor, exp: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """mag [out, groups, 32]. Before rounding every group's amax/scale is in (3, 6], so a group's largest
    code is 5 (value 3) at the least; such groups move to half the scale with every code doubled: the
    same values, one canonical encoding."""
    shrink = (mag.amax(-1) <= 5) & (mag.amax(-1) > 0) & (exp > -E8M0_BIAS)
    doubled = torch.tensor(DOUBLED_CODE, device=mag.device)[mag]
    return torch.where(shrink.unsqueeze(-1), doubled, mag), torch.where(shrink, exp - 1, exp)
