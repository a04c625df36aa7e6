"""Quantise float weights to MXFP4 (E2M1 codes + one E8M0 scale per 32 inputs), for exporting trained models.

Scale per group: 2^ceil(log2(amax / 6)), so the largest magnitude lands on or under E2M1's 6 and
nothing clips; each value rounds to the nearest E2M1 grid point. A matrix that already is MXFP4
comes back bit-exact (a group's scale is recovered from its largest code).
"""

from __future__ import annotations

import torch

from k3.ops.mxfp4.format import E8M0_BIAS, e2m1_table, pack_codes

E2M1_MAX = 6.0


def quantize(w: torch.Tensor, group_size: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    """w [out, in] float (in divisible by group_size) -> (packed [out, in/2] uint8, scale [out, in/g] uint8)."""
    out, inp = w.shape
    if inp % group_size or inp % 2:
        raise ValueError(f"MXFP4 needs the input width ({inp}) to be a multiple of {group_size}")
    groups = w.detach().double().reshape(out, inp // group_size, group_size)
    amax = groups.abs().amax(-1)
    exp = torch.ceil(torch.log2(amax.clamp_min(1e-300) / E2M1_MAX))
    exp = torch.where(amax > 0, exp, torch.full_like(exp, -E8M0_BIAS)).clamp(-E8M0_BIAS, 254 - E8M0_BIAS)
    scaled = groups / torch.exp2(exp).unsqueeze(-1)
    grid = e2m1_table(torch.float64)[:8]
    mag = (scaled.abs().unsqueeze(-1) - grid).abs().argmin(-1)
    codes = mag + 8 * (scaled < 0).long()
    # -0 becomes +0: the sign bit of a zero code carries nothing.
    codes = torch.where(mag == 0, torch.zeros_like(codes), codes)
    return pack_codes(codes.reshape(out, inp)), (exp + E8M0_BIAS).to(torch.uint8)
