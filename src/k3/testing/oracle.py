"""Outside oracle: mlx-lm's `kimi_k3` (spec section 8) run on MLX-CPU in fp32 over the same checkpoint."""

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
