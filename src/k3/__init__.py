"""k3: run, check and measure Kimi K3 from Python.

`k3.load(path)` returns the text model (an nn.Module) from a checkpoint in the official layout. `path`
is any model reference (k3/models.py): a directory, "default" (the bundled model, `k3.default_model()`),
or a downloaded Hugging Face repo id such as "moonshotai/Kimi-K3".
Heavy modules are imported on first use, so `import k3` stays cheap.
"""

from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["LLM", "EngineConfig", "K3Config", "SamplingParams", "default_model", "load", "load_config", "resolve_model"]


def load(path, dtype=None, device="cpu", *, memory_budget=None, **kwargs):
    """Load a K3 text model from a checkpoint directory.

    dtype=None picks what is fast on the device: on CPU, weights keep the checkpoint's bf16 bytes
    and compute runs in fp32; on GPUs, bf16. dtype=torch.float32 gives the exact fp32 model.
    """
    from k3.model.weights import load_model

    return load_model(path, dtype=dtype, device=device, memory_budget=memory_budget, **kwargs)


def __getattr__(name):
    if name in ("LLM", "EngineConfig", "SamplingParams"):
        import k3.engine as engine

        return getattr(engine, name)
    if name in ("K3Config", "load_config"):
        import k3.config as config

        return getattr(config, name)
    if name in ("default_model", "resolve_model"):
        import k3.models as models

        return getattr(models, name)
    raise AttributeError(f"module 'k3' has no attribute {name!r}")
