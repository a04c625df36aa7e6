"""Outside oracle: mlx-lm's `kimi_k3` (spec §8) run on MLX-CPU in fp32 over the same checkpoint."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def mlx_available() -> bool:
    try:
        import mlx.core  # noqa: F401
        import mlx_lm.models.kimi_k3  # noqa: F401
    except Exception:
        return False
    return True


def mlx_logits(path: str | Path, ids: np.ndarray, decode_from: int | None = None,
               dtype: str = "float32") -> np.ndarray:
    """ids [B, T] -> logits [B, T, vocab] as fp32 numpy, computed in `dtype` (float32 or the
    checkpoint's bfloat16). With `decode_from`, prefill that many tokens, then one at a time."""
    import mlx.core as mx
    from mlx_lm.utils import load_model

    model, _ = load_model(Path(path))
    if dtype == "float32":
        model.set_dtype(mx.float32)
    if decode_from is None:
        return np.array(model(mx.array(ids)).astype(mx.float32))
    cache = model.make_cache()
    parts = [model(mx.array(ids[:, :decode_from]), cache=cache)]
    for t in range(decode_from, ids.shape[1]):
        parts.append(model(mx.array(ids[:, t:t + 1]), cache=cache))
    return np.array(mx.concatenate(parts, axis=1).astype(mx.float32))


def mlx_vlm_available() -> bool:
    try:
        import mlx_vlm.models.kimi_k3.vision  # noqa: F401
    except Exception:
        return False
    return True


def mlx_vision_rows(path: str | Path, pixel_values: np.ndarray, grids: list[tuple[int, int, int]]) -> list[np.ndarray]:
    """mlx-vlm's K3 tower and projector (mlx_vlm/models/kimi_k3) over the checkpoint's vision tensors, in fp32:
    pixel_values [sum t*h*w, 3, p, p] -> per item its rows [(h/2)*(w/2), text hidden]."""
    import json

    import mlx.core as mx
    from safetensors import safe_open

    from mlx_vlm.models.kimi_k3.config import ModelConfig, TextConfig, VisionConfig
    from mlx_vlm.models.kimi_k3.kimi_k3 import KimiK3MultiModalProjector
    from mlx_vlm.models.kimi_k3.vision import VisionModel

    root = Path(path)
    raw = json.loads((root / "config.json").read_text())
    vision = VisionConfig.from_dict({**raw["vision_config"], "model_type": "moonvit3d"})
    text = TextConfig.from_dict(raw["text_config"])
    tower, projector = VisionModel(vision), KimiK3MultiModalProjector(ModelConfig(text_config=text, vision_config=vision))
    weights = {}
    index = json.loads((root / "model.safetensors.index.json").read_text())["weight_map"]
    for name, file in index.items():
        if name.startswith(("vision_tower.", "mm_projector.")):
            with safe_open(str(root / file), "pt") as f:
                weights[name] = mx.array(f.get_tensor(name).float().numpy())
    weights = tower.sanitize(weights)            # the conv weight to MLX's [out, kh, kw, in]
    tower.load_weights([(k.removeprefix("vision_tower."), v) for k, v in weights.items() if k.startswith("vision_tower.")])
    projector.load_weights([(k.removeprefix("mm_projector."), v) for k, v in weights.items() if k.startswith("mm_projector.")])
    merged = tower(mx.array(pixel_values.transpose(0, 2, 3, 1)), [list(g) for g in grids])   # MLX convolves NHWC
    rows = np.array(projector(merged).astype(mx.float32))
    sizes = np.cumsum([(h // 2) * (w // 2) for _, h, w in grids])[:-1]
    return np.split(rows, sizes)
