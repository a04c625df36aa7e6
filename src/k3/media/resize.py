"""K3's resize rule (NaViT style; vision spec §3.1): shrink, never enlarge, so the image holds at most
`in_patch_limit` whole patches and `patch_limit_on_one_side` patches a side, then pad right and bottom
to a multiple of the 2x2 merge. Pure arithmetic: a prompt's token count is known before any pixel is
touched."""

from __future__ import annotations

import math
from dataclasses import dataclass

from k3.config.vision import MediaConfig


@dataclass(frozen=True)
class ResizePlan:
    width: int            # after the resize (W1, H1)
    height: int
    pad_width: int        # zero columns on the right, rows at the bottom
    pad_height: int
    grid_h: int           # patches down and across after padding
    grid_w: int
    num_tokens: int       # image rows the model gets: (h/2)(w/2), or fixed_output_tokens


def plan_resize(width: int, height: int, m: MediaConfig = MediaConfig()) -> ResizePlan:
    p, side = m.patch_size, m.patch_limit_on_one_side
    s1 = math.sqrt(m.in_patch_limit / (max(1, width // p) * max(1, height // p)))
    scale = min(1.0, s1, side * p / width, side * p / height)
    w1 = min(max(1, int(width * scale)), side * p)          # int(): truncation, as the reference does
    h1 = min(max(1, int(height * scale)), side * p)
    factor = m.merge_kernel * p
    pad_w, pad_h = (factor - w1 % factor) % factor, (factor - h1 % factor) % factor
    gh, gw = (h1 + pad_h) // p, (w1 + pad_w) // p
    tokens = m.fixed_output_tokens if m.fixed_output_tokens is not None else (gh // m.merge_kernel) * (gw // m.merge_kernel)
    return ResizePlan(w1, h1, pad_w, pad_h, gh, gw, tokens)
