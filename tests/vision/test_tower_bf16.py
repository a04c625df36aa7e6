"""The tower's opt-in bf16 compute (EngineConfig.vision_dtype, `--vision-dtype bfloat16`): its image rows stay
within bf16's reach of the exact fp32 path, which stays the default (and the one the oracle checks)."""

from __future__ import annotations

import torch

from images_support import encoded
from k3 import LLM, SamplingParams
from k3.engine.image_prompts import prepare_all
from k3.media import ImageLimits
from k3.testing.tolerance import assert_close


def test_bf16_rows_stay_near_the_fp32_rows_and_fp32_is_the_default(vision_checkpoint):
    exact = LLM(vision_checkpoint, dtype=torch.float32, cache_memory="64MiB")
    fast = LLM(vision_checkpoint, dtype=torch.float32, cache_memory="64MiB", vision_dtype="bfloat16")
    assert exact.config.vision_dtype == "float32" and exact.model.vision_dtype == "float32"
    images = prepare_all([encoded(size=(200, 150), noise=2), encoded(size=(90, 300), noise=3)], exact.media,
                         ImageLimits())
    pixels = torch.cat([i.pixel_values for i in images])
    grid = torch.tensor([list(i.grid) for i in images])
    want = exact.model.encode_images(pixels, grid)
    got = fast.model.encode_images(pixels, grid)
    for w, g in zip(want, got):
        assert g.dtype == w.dtype == torch.float32 and g.shape == w.shape
        assert_close("bf16 tower rows", g, w, 3e-2)
        assert not torch.equal(g, w)                             # it did run in bf16
    chat = [{"role": "user", "content": [{"type": "text", "text": "What?"}, {"type": "image", "image": encoded()}]}]
    out = fast.chat(chat, SamplingParams(max_tokens=2, temperature=0))[0]
    assert out.output.error is None and len(out.output.token_ids) == 2


def test_an_unknown_vision_dtype_is_refused():
    import pytest

    from k3.engine.config import EngineConfig

    with pytest.raises(ValueError, match="vision_dtype: one of float32, bfloat16"):
        EngineConfig(vision_dtype="int4")
