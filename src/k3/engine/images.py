"""A request's images on their way through the engine: where their rows go in the prompt, the rows once
the tower has made them, and the ids the prefix cache keys the prompt by.

All image pads share one token id, so the prefix cache cannot key on the ids alone: two prompts with
different images would look the same. `key_ids` gives every pad a key of its own derived from its image's
digest (and the row's place in it), a negative number no real token has. The same image in the same place
keys the same, so it is reused; a different image never is.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

ROW_BITS = 24      # rows an image may have: 16,641 at most for K3 (vision spec §3.1)


@dataclass
class PromptImages:
    images: list                     # k3.media.PreparedImage, in prompt order
    positions: list[int]             # prompt positions of their pads, in order (one per row)
    key_ids: list[int]               # the prompt with every pad replaced by its image key
    rows: torch.Tensor | None = None  # [len(positions), hidden] once encoded; dropped after the prefill
    row_of: dict[int, int] = field(default_factory=dict)   # prompt position -> row

    @classmethod
    def place(cls, prompt_ids: list[int], images: list, pad_id: int) -> "PromptImages":
        positions = [i for i, t in enumerate(prompt_ids) if t == pad_id]
        want = sum(im.num_tokens for im in images)
        if len(positions) != want:
            raise ValueError(f"the prompt has {len(positions)} image pad tokens (id {pad_id}) but its {len(images)} "
                             f"image(s) need {want}: put each image's block (PreparedImage.block) in the prompt "
                             "once, in order")
        keys, j = list(prompt_ids), 0
        for im in images:
            base = int(im.digest[:30], 16) << ROW_BITS
            for r in range(im.num_tokens):
                keys[positions[j]] = -(1 + base + r)
                j += 1
        return cls(list(images), positions, keys, row_of={p: i for i, p in enumerate(positions)})

    @property
    def last_position(self) -> int:
        return self.positions[-1] if self.positions else -1
