"""The vision tower's own ops (vision spec §4): the position table resampled to an image's patch
grid, the time table of multi-frame chunks, 2-D rotary embedding, the tower's RMSNorm and attention
within one image. Each fast op has its plain reference beside it (tests/vision/test_vision_ops.py).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

ROPE_BASE = 10000.0


def resample_table(table: torch.Tensor, h: int, w: int, mode: str = "bilinear") -> torch.Tensor:
    """table [H0, W0, D] -> [h * w, D] row-major: PyTorch `interpolate` with half-pixel centres, no corner
    alignment and no antialias (4.3); the table itself when the grid is its size."""
    H0, W0, D = table.shape
    if (h, w) == (H0, W0):
        return table.reshape(H0 * W0, D)
    grid = table.permute(2, 0, 1).unsqueeze(0)                      # [1, D, H0, W0]
    out = F.interpolate(grid, size=(h, w), mode=mode, align_corners=False)
    return out[0].permute(1, 2, 0).reshape(h * w, D)


def resample_table_reference(table: torch.Tensor, h: int, w: int) -> torch.Tensor:
    """Bilinear by the formula of 4.3, rows then columns, in float64: source s = max(0, (i + 1/2) n / m - 1/2),
    taps floor(s) and the next (clamped), weights 1 - frac and frac."""
    def axis(x: torch.Tensor, m: int, dim: int) -> torch.Tensor:
        n = x.shape[dim]
        s = ((torch.arange(m, dtype=torch.float64) + 0.5) * n / m - 0.5).clamp(min=0)
        i0 = s.floor().long()
        i1 = (i0 + 1).clamp(max=n - 1)
        lam = (s - i0).reshape([-1 if d == dim else 1 for d in range(x.dim())])
        return (1 - lam) * x.index_select(dim, i0) + lam * x.index_select(dim, i1)

    t = table.to(torch.float64)
    return axis(axis(t, h, 0), w, 1).reshape(h * w, -1)


def time_table(frames: int, dim: int) -> torch.Tensor:
    """[frames, dim] fixed sin/cos rows (4.2): T[tau, k] = sin(tau w_k), T[tau, dim/2 + k] = cos(tau w_k),
    w_k = 10000^(-k / (dim/2)). Added to every frame of a chunk of more than one frame, never for images."""
    half = dim // 2
    omega = ROPE_BASE ** (-torch.arange(half, dtype=torch.float64) / half)
    angle = torch.arange(frames, dtype=torch.float64)[:, None] * omega[None]
    return torch.cat([angle.sin(), angle.cos()], dim=1).float()


def rope2d_angles(h: int, w: int, head_dim: int) -> torch.Tensor:
    """[h * w, head_dim / 2] angles, row-major over the grid: pair 2n turns by column * f_n, pair 2n + 1 by
    row * f_n, f_n = 10000^(-4n / head_dim) (4.4: column on even pairs, row on odd pairs)."""
    f = ROPE_BASE ** (-4.0 * torch.arange(head_dim // 4, dtype=torch.float64) / head_dim)
    rows = torch.arange(h, dtype=torch.float64).repeat_interleave(w)
    cols = torch.arange(w, dtype=torch.float64).repeat(h)
    return torch.stack([cols[:, None] * f, rows[:, None] * f], dim=-1).reshape(h * w, head_dim // 2)


def apply_rope2d(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [L, A, d]; cos, sin [L, d/2] (fp32). Adjacent channel pairs (2j, 2j+1) are rotated as complex numbers
    by angle j, in fp32, then cast back to x.dtype."""
    xf = x.float().unflatten(-1, (-1, 2))
    a, b = xf[..., 0], xf[..., 1]
    c, s = cos[:, None, :], sin[:, None, :]
    return torch.stack([a * c - b * s, a * s + b * c], dim=-1).flatten(-2).to(x.dtype)


def tower_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """`torch.nn.RMSNorm` as the tower builds it: normalise and scale in fp32, then cast back (4.6)."""
    return F.rms_norm(x.float(), (x.shape[-1],), weight.float(), eps).to(x.dtype)


def image_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """q, k, v [L, A, d] of one image (or chunk) -> [L, A * d]: full, non-causal attention over its L
    tokens, scale 1/sqrt(d). As [1, A, L, d] views, SDPA takes its flash kernel on a CPU, which never holds
    the L x L scores (as [A, L, d] it falls back to the math path: twice the time, the scores in memory)."""
    o = F.scaled_dot_product_attention(q.unsqueeze(0).transpose(1, 2), k.unsqueeze(0).transpose(1, 2),
                                       v.unsqueeze(0).transpose(1, 2))
    return o[0].transpose(0, 1).reshape(q.shape[0], -1)


def image_attention_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """softmax(q k^T / sqrt(d)) v per head, written out."""
    scores = torch.einsum("lad,mad->alm", q, k) / math.sqrt(q.shape[-1])
    return torch.einsum("alm,mad->lad", scores.softmax(-1), v).reshape(q.shape[0], -1)
