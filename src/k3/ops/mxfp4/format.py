"""MXFP4 (OCP MX, compressed-tensors `mxfp4-pack-quantized`) bit format: E2M1 codes, E8M0 scales.

`packed[r, j]` holds column 2j in the low nibble and column 2j+1 in the high nibble; a nibble is an
E2M1 code (bit 3 sign, bits 0-2 magnitude index). `scale[r, c // 32]` is a biased exponent:
value = E2M1[code] * 2**(scale - 127). Byte 255 is NaN in OCP MX and is rejected.
"""

from __future__ import annotations

import torch

E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)
E8M0_NAN = 255
E8M0_BIAS = 127


class MXFP4FormatError(ValueError):
    """Packed bytes or scales that cannot be MXFP4 (E8M0 byte 255, wrong shapes)."""


def e2m1_table(dtype: torch.dtype = torch.float32, device=None) -> torch.Tensor:
    """[16] decoded E2M1 values."""
    return torch.tensor(E2M1_VALUES, dtype=dtype, device=device)


def e8m0_table(dtype: torch.dtype = torch.float32, device=None) -> torch.Tensor:
    """[256] exact powers of two 2**(s-127); entry 255 is NaN. 2**-127 is an fp32 subnormal, still exact."""
    vals = [2.0 ** (s - E8M0_BIAS) for s in range(255)] + [float("nan")]
    return torch.tensor(vals, dtype=torch.float64, device=device).to(dtype)


def check_scales(scale: torch.Tensor, name: str = "weight_scale") -> None:
    """Raise if any E8M0 byte is 255 (NaN scale)."""
    if bool((scale == E8M0_NAN).any()):
        n = int((scale == E8M0_NAN).sum())
        raise MXFP4FormatError(
            f"{name}: {n} E8M0 scale byte(s) equal 255, which is NaN in OCP MX; "
            "the checkpoint is corrupt or not MXFP4 - re-download the shard or run `k3 verify`")


def check_pair(packed: torch.Tensor, scale: torch.Tensor, group_size: int = 32, name: str = "weight") -> None:
    if packed.dtype != torch.uint8 or scale.dtype != torch.uint8:
        raise MXFP4FormatError(f"{name}: packed weights and scales must be uint8, got {packed.dtype}/{scale.dtype}")
    rows, half = packed.shape[-2:]
    if scale.shape[-2] != rows or scale.shape[-1] * group_size != 2 * half:
        raise MXFP4FormatError(
            f"{name}: scale shape {tuple(scale.shape)} does not match packed shape {tuple(packed.shape)} "
            f"with group size {group_size}")


def unpack_codes(packed: torch.Tensor) -> torch.Tensor:
    """[..., n/2] uint8 -> [..., n] uint8 E2M1 codes in column order (low nibble first)."""
    lo = packed & 0x0F
    hi = packed >> 4
    return torch.stack((lo, hi), dim=-1).flatten(-2)


def pack_codes(codes: torch.Tensor) -> torch.Tensor:
    """Inverse of `unpack_codes`: [..., n] codes (0..15) -> [..., n/2] uint8."""
    c = codes.to(torch.uint8)
    return c[..., 0::2] | (c[..., 1::2] << 4)
