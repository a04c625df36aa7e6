"""Images in the model: the tower and projector a K3ForCausalLM holds when its checkpoint has them, image
rows from pixels (`encode_images`), and where those rows go in a prompt (`Splice`): the rows replace the
embeddings of the `<|media_pad|>` positions in order (vision spec §6, the serving convention:
one pad per image row, so a prompt's token count is known before the tower runs)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from k3.config.vision import VisionConfig
from k3.layers.vision import Projector, VisionTower, merge_2x2


@dataclass(frozen=True)
class Splice:
    """positions [M] (long, into the packed rows of a forward) take rows [M, hidden]."""
    positions: torch.Tensor
    rows: torch.Tensor


def grids_of(grid_thw: torch.Tensor | list) -> list[tuple[int, int, int]]:
    """[n, 3] (t, h, w) -> a list of int triples, checked (h and w even, for the 2x2 merge)."""
    grids = [tuple(int(x) for x in row) for row in (grid_thw.tolist() if torch.is_tensor(grid_thw) else grid_thw)]
    for i, g in enumerate(grids):
        if len(g) != 3 or min(g) < 1 or g[1] % 2 or g[2] % 2:
            raise ValueError(f"grid_thw[{i}] = {list(g)}: expected (t, h, w) with t >= 1 and even h, w "
                             "(k3.media.prepare_image makes them)")
    return grids


def encode(tower: VisionTower, projector: Projector, v: VisionConfig, pixel_values: torch.Tensor,
           grid_thw, dtype: torch.dtype) -> list[torch.Tensor]:
    """pixel_values [sum t*h*w, 3, p, p], grid_thw [n, 3] -> per item its rows [(h/2)*(w/2), hidden]."""
    grids = grids_of(grid_thw)
    need = sum(t * h * w for t, h, w in grids)
    p = v.patch_size
    if pixel_values.dim() != 4 or tuple(pixel_values.shape[1:]) != (3, p, p) or pixel_values.shape[0] != need:
        raise ValueError(f"pixel_values has shape {list(pixel_values.shape)}; grid_thw {[list(g) for g in grids]} "
                         f"needs [{need}, 3, {p}, {p}]")
    for t, _, _ in grids:
        if t > v.pos_emb_time:
            raise ValueError(f"a chunk of {t} frames: the tower takes at most {v.pos_emb_time}")
    out, start = [], 0
    for group in _groups(grids):
        n = sum(t * h * w for t, h, w in group)
        y, merged, at = tower(pixel_values[start:start + n].to(dtype), group), [], 0
        for t, h, w in group:
            merged.append(merge_2x2(y[at:at + t * h * w], t, h, w))
            at += t * h * w
        out += list(projector(torch.cat(merged)).split([m.shape[0] for m in merged]))
        start += n
    return out


GROUP_PATCHES = 65536   # items go through the tower together up to this many patches (one largest K3 image)


def _groups(grids: list[tuple[int, int, int]]) -> list[list[tuple[int, int, int]]]:
    """Consecutive items in groups of at most GROUP_PATCHES patches (an item larger than that alone): the
    tower's activations stay those of one large image however many a request sends, which is what the
    memory plan reserves (k3.streaming.vision_memory)."""
    groups, size = [[]], 0
    for g in grids:
        n = g[0] * g[1] * g[2]
        if groups[-1] and size + n > GROUP_PATCHES:
            groups.append([])
            size = 0
        groups[-1].append(g)
        size += n
    return groups


def splice_for(input_ids: torch.Tensor, rows: list[torch.Tensor], pad_id: int) -> Splice:
    """The pad positions of input_ids [B, T] (flattened) take the images' rows in order; counts must match."""
    positions = (input_ids.reshape(-1) == pad_id).nonzero().squeeze(1)
    total = sum(r.shape[0] for r in rows)
    if positions.numel() != total:
        raise ValueError(f"input_ids hold {positions.numel()} image pad tokens (id {pad_id}) but the images give "
                         f"{total} rows; expand each image's placeholder to its row count (k3.media.image_block)")
    return Splice(positions, torch.cat(rows) if rows else torch.empty(0))


def attach(model, v: VisionConfig) -> None:
    """Give a model the tower and projector modules (placeholders the loader fills)."""
    model.vision_tower = VisionTower(v)
    model.mm_projector = Projector(v)
