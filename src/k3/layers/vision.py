"""K3's vision tower (MoonViT-3d) and projector (sd2_tpool merge + patchmergerv2), vision spec §4
and §5, as modules whose parameter names are the checkpoint's (`vision_tower.…`, `mm_projector.…`).

Items (images, or chunks of frames) never interact: row-wise steps (patch embedding, norms, projections,
the MLP) run on all items' rows at once, attention runs per item. The float64 reference this is tested
against is `k3.layers.vision_reference`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from k3.config.vision import VisionConfig
from k3.layers.basic import Linear, WeightOnly
from k3.ops.linear import linear
from k3.ops.vision import apply_rope2d, image_attention, resample_table, rope2d_angles, time_table, tower_rms_norm


class TowerNorm(WeightOnly):
    def __init__(self, dim: int, eps: float):
        super().__init__(dim)
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return tower_rms_norm(x, self.weight, self.eps)


class PatchEmbed(nn.Module):
    def __init__(self, v: VisionConfig):
        super().__init__()
        self.v = v
        self.proj = WeightOnly(v.hidden_size, 3, v.patch_size, v.patch_size)     # bias-free conv, stride p
        self.pos_emb = WeightOnly(v.pos_emb_height, v.pos_emb_width, v.hidden_size)

    def forward(self, pixels: torch.Tensor, grids: list[tuple[int, int, int]]) -> torch.Tensor:
        """pixels [sum t*h*w, 3, p, p] -> [sum t*h*w, D]: each patch through the conv (a matmul over its
        3*p*p values), plus the resampled table at its (row, column), plus the time row when t > 1."""
        x = linear(pixels.reshape(pixels.shape[0], -1), self.proj.weight.reshape(self.v.hidden_size, -1))
        pos = []
        for t, h, w in grids:
            spatial = resample_table(self.pos_emb.weight.to(x.dtype), h, w, self.v.pos_emb_interpolation)
            if t == 1:
                pos.append(spatial)
            else:
                times = time_table(t, self.v.hidden_size).to(x.dtype)
                pos.append((spatial[None] + times[:, None]).reshape(t * h * w, -1))
        return x + torch.cat(pos)


class MLP(nn.Module):
    def __init__(self, v: VisionConfig):
        super().__init__()
        self.fc0 = Linear(v.hidden_size, v.intermediate_size)
        self.fc1 = Linear(v.intermediate_size, v.hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc1(F.gelu(self.fc0(x), approximate="tanh"))


class TowerBlock(nn.Module):
    def __init__(self, v: VisionConfig):
        super().__init__()
        self.v = v
        self.norm0 = TowerNorm(v.hidden_size, v.norm_eps)
        self.wqkv = Linear(v.hidden_size, 3 * v.qkv_size)
        self.wo = Linear(v.qkv_size, v.hidden_size)
        self.norm1 = TowerNorm(v.hidden_size, v.norm_eps)
        self.mlp = MLP(v)

    def forward(self, x: torch.Tensor, spans: list[tuple[int, int]], rope: list[tuple[torch.Tensor, torch.Tensor]]):
        """x [rows, D]; spans: each item's (start, end) rows; rope: each item's (cos, sin) [rows_i, d/2]."""
        v = self.v
        qkv = self.wqkv(self.norm0(x)).view(-1, 3, v.num_heads, v.head_dim)    # q, k, v: all q, then k, then v
        outs = []
        for (a, b), (cos, sin) in zip(spans, rope):
            q, k, val = qkv[a:b].unbind(1)
            outs.append(image_attention(apply_rope2d(q, cos, sin), apply_rope2d(k, cos, sin), val))
        x = x + self.wo(torch.cat(outs))
        return x + self.mlp(self.norm1(x))


class Encoder(nn.Module):
    def __init__(self, v: VisionConfig):
        super().__init__()
        self.blocks = nn.ModuleList(TowerBlock(v) for _ in range(v.num_layers))
        self.final_layernorm = TowerNorm(v.hidden_size, v.norm_eps)


class VisionTower(nn.Module):
    def __init__(self, v: VisionConfig):
        super().__init__()
        self.v = v
        self.patch_embed = PatchEmbed(v)
        self.encoder = Encoder(v)

    def forward(self, pixels: torch.Tensor, grids: list[tuple[int, int, int]]) -> torch.Tensor:
        """pixels [sum t*h*w, 3, p, p] in (item, frame, row, column) order -> [sum t*h*w, D]."""
        spans, rope, start = [], [], 0
        for t, h, w in grids:
            spans.append((start, start + t * h * w))
            start += t * h * w
            angles = rope2d_angles(h, w, self.v.head_dim).repeat(t, 1)          # every frame, the same angles
            rope.append((angles.cos().float(), angles.sin().float()))
        x = self.patch_embed(pixels, grids)
        for block in self.encoder.blocks:
            x = block(x, spans, rope)
        return self.encoder.final_layernorm(x)


def merge_2x2(y: torch.Tensor, t: int, h: int, w: int) -> torch.Tensor:
    """sd2_tpool (5.1): y [t*h*w, D] -> [(h/2)*(w/2), 4D], the mean over frames of each 2x2 neighbourhood's
    rows side by side in kernel-row-major order."""
    D = y.shape[-1]
    g = y.view(t, h // 2, 2, w // 2, 2, D).permute(0, 1, 3, 2, 4, 5).mean(0)   # [h/2, w/2, 2, 2, D]
    return g.reshape((h // 2) * (w // 2), 4 * D)


class Projector(nn.Module):
    """patchmergerv2 (5.2): RMSNorm(gelu_erf(M proj.0^T) proj.2^T; post_norm, 1e-5)."""

    def __init__(self, v: VisionConfig):
        super().__init__()
        self.proj = nn.ModuleList([Linear(v.merged_width, v.merged_width), nn.GELU(),
                                   Linear(v.merged_width, v.text_hidden_size)])
        self.post_norm = TowerNorm(v.text_hidden_size, v.projector_eps)

    def forward(self, merged: torch.Tensor) -> torch.Tensor:
        return self.post_norm(self.proj[2](self.proj[1](self.proj[0](merged))))
