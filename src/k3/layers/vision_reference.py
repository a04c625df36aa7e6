"""A float64 reference for the vision path, written from the vision spec's equations and apart from the
modules in `k3.layers.vision`: weights from a plain dict of the checkpoint's tensors, one image at a time,
rotary embedding as complex multiplication, the merge by explicit indexing, GELUs by their formulas.
Slow; for tests (tests/vision) and for checking a port.
"""

from __future__ import annotations

import math

import torch

from k3.config.vision import VisionConfig
from k3.ops.vision import ROPE_BASE, resample_table_reference

T = "vision_tower."
P = "mm_projector."


def _rms(x: torch.Tensor, g: torch.Tensor, eps: float) -> torch.Tensor:
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * g


def _rotate(x: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """x [L, A, d]: channel pair j as z_j = x[2j] + i x[2j+1], z_j <- z_j e^{i theta_j}; theta_{2n} = col f_n,
    theta_{2n+1} = row f_n, f_n = 10000^(-4n/d)."""
    d = x.shape[-1]
    f = ROPE_BASE ** (-4.0 * torch.arange(d // 4, dtype=torch.float64) / d)
    theta = torch.empty(x.shape[0], d // 2, dtype=torch.float64)
    theta[:, 0::2] = cols[:, None] * f
    theta[:, 1::2] = rows[:, None] * f
    z = torch.complex(x[..., 0::2], x[..., 1::2]) * torch.polar(torch.ones_like(theta), theta)[:, None, :]
    return torch.stack([z.real, z.imag], dim=-1).reshape(x.shape)


def tower_item(w: dict, v: VisionConfig, pixels: torch.Tensor, t: int, h: int, w_: int) -> torch.Tensor:
    """One item's patches [t*h*w, 3, p, p] -> the tower's output [t*h*w, D] in float64."""
    f64 = {k: x.to(torch.float64) for k, x in w.items()}
    L, D, A, d = t * h * w_, v.hidden_size, v.num_heads, v.head_dim
    x = torch.einsum("lcij,ocij->lo", pixels.to(torch.float64), f64[T + "patch_embed.proj.weight"])
    pos = resample_table_reference(f64[T + "patch_embed.pos_emb.weight"], h, w_)
    x = x + pos.repeat(t, 1)
    if t > 1:
        k = torch.arange(D // 2, dtype=torch.float64)
        omega = 10000.0 ** (-k / (D // 2))
        for tau in range(t):
            x[tau * h * w_:(tau + 1) * h * w_, :D // 2] += torch.sin(tau * omega)
            x[tau * h * w_:(tau + 1) * h * w_, D // 2:] += torch.cos(tau * omega)
    rows = torch.arange(h, dtype=torch.float64).repeat_interleave(w_).repeat(t)
    cols = torch.arange(w_, dtype=torch.float64).repeat(h * t)
    for i in range(v.num_layers):
        b = f"{T}encoder.blocks.{i}."
        qkv = _rms(x, f64[b + "norm0.weight"], v.norm_eps) @ f64[b + "wqkv.weight"].T
        q, k_, val = (qkv[:, j * v.qkv_size:(j + 1) * v.qkv_size].reshape(L, A, d) for j in range(3))
        q, k_ = _rotate(q, rows, cols), _rotate(k_, rows, cols)
        heads = []
        for a in range(A):
            s = q[:, a] @ k_[:, a].T / math.sqrt(d)
            p = torch.exp(s - s.max(-1, keepdim=True).values)
            heads.append((p / p.sum(-1, keepdim=True)) @ val[:, a])
        x = x + torch.cat(heads, dim=-1) @ f64[b + "wo.weight"].T
        u = _rms(x, f64[b + "norm1.weight"], v.norm_eps) @ f64[b + "mlp.fc0.weight"].T
        gelu = 0.5 * u * (1 + torch.tanh(math.sqrt(2 / math.pi) * (u + 0.044715 * u ** 3)))
        x = x + gelu @ f64[b + "mlp.fc1.weight"].T
    return _rms(x, f64[T + "encoder.final_layernorm.weight"], v.norm_eps)


def project_item(w: dict, v: VisionConfig, y: torch.Tensor, t: int, h: int, w_: int) -> torch.Tensor:
    """The tower's rows of one item [t*h*w, D] -> its image rows [(h/2)*(w/2), text hidden], float64."""
    f64 = {k: x.to(torch.float64) for k, x in w.items() if k.startswith(P)}
    grid = y.reshape(t, h, w_, -1).mean(0)
    merged = torch.stack([torch.cat([grid[2 * a, 2 * b], grid[2 * a, 2 * b + 1], grid[2 * a + 1, 2 * b],
                                     grid[2 * a + 1, 2 * b + 1]]) for a in range(h // 2) for b in range(w_ // 2)])
    u = merged @ f64[P + "proj.0.weight"].T
    u = 0.5 * u * (1 + torch.erf(u / math.sqrt(2)))
    return _rms(u @ f64[P + "proj.2.weight"].T, f64[P + "post_norm.weight"], v.projector_eps)


def encode_reference(w: dict, v: VisionConfig, pixels: torch.Tensor, grids: list[tuple[int, int, int]]) -> list[torch.Tensor]:
    """Every item's image rows, one item at a time."""
    out, start = [], 0
    for t, h, w_ in grids:
        n = t * h * w_
        out.append(project_item(w, v, tower_item(w, v, pixels[start:start + n], t, h, w_), t, h, w_))
        start += n
    return out
