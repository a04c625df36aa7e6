"""What the vision tower holds: its weights (resident always: every image runs all of them) and the
activations of the largest image the preprocessing allows (vision spec §9: about 66k patches for K3)."""

from __future__ import annotations

from k3.checkpoint.vision_layout import vision_tensors
from k3.config.model import K3Config
from k3.config.vision import MediaConfig

ACT_BYTES = 4   # activations in fp32 on a CPU


def vision_weight_bytes(c: K3Config, storage_itemsize: int | None) -> int:
    if c.vision is None:
        return 0
    return sum(s.nbytes if storage_itemsize is None else s.params * storage_itemsize for s in vision_tensors(c.vision))


def vision_activation_bytes(c: K3Config, media: MediaConfig = MediaConfig()) -> int:
    """A block's live tensors for the largest image: the residual and its norm (2D), q/k/v (3Q), the attention
    output (Q) and the MLP's hidden (F) per patch, plus the image's rows into the text model."""
    v = c.vision
    if v is None:
        return 0
    side = media.patch_limit_on_one_side
    patches = min(media.in_patch_limit + 4 * side, side * side)          # the rule's worst case past the budget
    per_patch = 2 * v.hidden_size + 4 * v.qkv_size + v.intermediate_size
    rows = patches // (media.merge_kernel ** 2) * (v.text_hidden_size + v.merged_width)
    return (patches * per_patch + rows) * ACT_BYTES


def vision_bytes(c: K3Config, storage_itemsize: int | None) -> int:
    return vision_weight_bytes(c, storage_itemsize) + vision_activation_bytes(c)
