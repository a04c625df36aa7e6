"""The vision tower's and projector's tensors as the release stores them (vision spec §2): 165
tower tensors under `vision_tower.` and 3 projector tensors under `mm_projector.`, all BF16, no biases,
names without the text model's `language_model.` prefix. Shapes `[out, in]`."""

from __future__ import annotations

from k3.checkpoint.layout import ExpectedTensor, _t
from k3.config.vision import VisionConfig

TOWER = "vision_tower."
PROJECTOR = "mm_projector."
VISION_PREFIXES = (TOWER, PROJECTOR)


def vision_tensors(v: VisionConfig) -> list[ExpectedTensor]:
    D, Q, F, p = v.hidden_size, v.qkv_size, v.intermediate_size, v.patch_size
    specs = [_t(TOWER + "patch_embed.proj.weight", (D, 3, p, p)),
             _t(TOWER + "patch_embed.pos_emb.weight", (v.pos_emb_height, v.pos_emb_width, D))]
    for i in range(v.num_layers):
        b = f"{TOWER}encoder.blocks.{i}."
        specs += [_t(b + "norm0.weight", (D,)), _t(b + "wqkv.weight", (3 * Q, D)), _t(b + "wo.weight", (D, Q)),
                  _t(b + "norm1.weight", (D,)), _t(b + "mlp.fc0.weight", (F, D)), _t(b + "mlp.fc1.weight", (D, F))]
    specs.append(_t(TOWER + "encoder.final_layernorm.weight", (D,)))
    specs += [_t(PROJECTOR + "proj.0.weight", (v.merged_width, v.merged_width)),
              _t(PROJECTOR + "proj.2.weight", (v.text_hidden_size, v.merged_width)),
              _t(PROJECTOR + "post_norm.weight", (v.text_hidden_size,))]
    return specs


def vision_bytes(v: VisionConfig | None) -> int:
    """Bytes the tower and projector take as stored (bf16)."""
    return sum(s.nbytes for s in vision_tensors(v)) if v is not None else 0
