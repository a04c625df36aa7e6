"""EngineConfig: every setting of an engine and of the model it loads, validated once.

One object stands behind `k3.LLM(...)` (its keywords are these fields, vLLM's names), `LLMEngine`, and the
flags of `k3 serve`, `generate`, `chat`, `bench --model`, `eval` and `check` with a local model (one parser,
k3/cli/engine_args.py). Values arrive as users write them ("1GiB", a JSON string, "bfloat16") and leave
construction as what the engine uses (bytes, a SpeculativeConfig, a torch dtype); a bad value is a
ValueError naming the field and what it takes, before anything loads. `settings()` gives the fields that
differ from the defaults as JSON, which is how a config travels through Inspect's model arguments and
into eval logs and check.json, and `EngineConfig(**settings)` reads it back.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, fields

import torch

from k3.config.engine_settings import DTYPES, SETTINGS, VISION_DTYPES
from k3.config.units import parse_size
from k3.engine.speculative.config import SpeculativeConfig
from k3.media import ImageLimits

TRUNKS = (None, "int8")


def setting(name: str):
    """A field whose default and command-line help live in k3.config.engine_settings (cli/engine_args.py makes
    it a flag)."""
    return field(default=SETTINGS[name].default, metadata={"flag": name})


@dataclass(frozen=True)
class EngineConfig:
    # How the model loads
    dtype: torch.dtype | None = setting("dtype")             # None: fp32 on a CPU, weights as stored
    device: str = setting("device")
    memory_budget: int | None = setting("memory_budget")     # bytes for weights + cache_memory; the rest streams
    trunk: str | None = None                                 # "int8": quantise the trunk as it loads (cli/trunk_arg.py)
    vision: bool = setting("vision")                         # load the checkpoint's vision tower (when it has one)
    vision_dtype: str = setting("vision_dtype")              # the tower's compute: float32 (exact) or bfloat16
    image_limits: ImageLimits = field(default_factory=ImageLimits)   # k3 serve's --max-image-* flags
    # The engine
    max_num_seqs: int = setting("max_num_seqs")              # sequences decoded together
    max_num_batched_tokens: int = setting("max_num_batched_tokens")   # tokens per step; prompts prefill in chunks
    cache_memory: int = setting("cache_memory")              # KDA slots + the MLA latent cache
    block_size: int = setting("block_size")                  # tokens per MLA cache block
    max_resident_seqs: int | None = setting("max_resident_seqs")      # fewer than max_num_seqs: the rest waits on disk
    state_offload_dir: str | None = setting("state_offload_dir")      # where (default: a private temporary folder)
    max_model_len: int | None = setting("max_model_len")     # prompt + generated tokens per request
    seed: int = 0                                            # seeds the requests that bring none (commands: --seed)
    enable_prefix_caching: bool = setting("enable_prefix_caching")
    prefix_cache_memory: int | None = setting("prefix_cache_memory")  # of cache_memory, for KDA snapshots
    prefix_cache_spill_dir: str | None = setting("prefix_cache_spill_dir")   # evicted snapshots written there
    prefix_cache_spill_bytes: int = setting("prefix_cache_spill_bytes")
    speculative_config: SpeculativeConfig | None = setting("speculative_config")   # vLLM's dict or JSON; None: off

    def __post_init__(self) -> None:
        for name, value in _normalised(self).items():
            object.__setattr__(self, name, value)
        _check(self)

    def replace(self, **changes) -> "EngineConfig":
        """A copy with `changes` (validated as construction validates)."""
        unknown = sorted(set(changes) - FIELDS)
        if unknown:
            raise TypeError(f"unknown engine setting(s) {', '.join(unknown)}; k3.EngineConfig takes "
                            f"{', '.join(sorted(FIELDS))}")
        return dataclasses.replace(self, **changes)

    def settings(self) -> dict:
        """The fields that differ from the defaults, as JSON values (EngineConfig(**settings) reads them back)."""
        default = EngineConfig()
        return {f.name: _json(getattr(self, f.name)) for f in fields(self)
                if getattr(self, f.name) != getattr(default, f.name)}


FIELDS = frozenset(f.name for f in fields(EngineConfig))


def _normalised(c: EngineConfig) -> dict:
    """Each field as the engine uses it, from the forms users write."""
    out = {"memory_budget": None if c.memory_budget is None else parse_size(c.memory_budget, "memory_budget"),
           "cache_memory": parse_size(c.cache_memory, "cache_memory"),
           "prefix_cache_spill_bytes": parse_size(c.prefix_cache_spill_bytes, "prefix_cache_spill_bytes"),
           "prefix_cache_memory": None if c.prefix_cache_memory is None else 0 if c.prefix_cache_memory in (0, "0")
           else parse_size(c.prefix_cache_memory, "prefix_cache_memory"),
           "speculative_config": SpeculativeConfig.parse(c.speculative_config)}
    if isinstance(c.dtype, str):
        name = c.dtype.removeprefix("torch.")
        if name == "auto":
            out["dtype"] = None
        elif name in DTYPES:
            out["dtype"] = getattr(torch, name)
        else:
            raise ValueError(f"dtype: expected auto or one of {', '.join(DTYPES)}, got {c.dtype!r}")
    if isinstance(c.image_limits, dict):
        out["image_limits"] = ImageLimits(**c.image_limits)
    return out


def _check(c: EngineConfig) -> None:
    if c.vision_dtype not in VISION_DTYPES:
        raise ValueError(f"vision_dtype: one of {', '.join(VISION_DTYPES)}, got {c.vision_dtype!r}")
    for name in ("max_num_seqs", "max_num_batched_tokens", "block_size"):
        _positive(name, getattr(c, name))
    for name in ("max_resident_seqs", "max_model_len"):
        if getattr(c, name) is not None:
            _positive(name, getattr(c, name))
    if c.max_model_len is not None and c.max_model_len < 2:
        raise ValueError(f"max_model_len: at least 2 (a prompt token and one generated), got {c.max_model_len}")
    if c.max_resident_seqs is not None and c.max_resident_seqs > c.max_num_seqs:
        raise ValueError(f"max_resident_seqs ({c.max_resident_seqs}) is more than max_num_seqs ({c.max_num_seqs}); "
                         "it counts the sequences of max_num_seqs whose state stays in memory")
    if c.dtype is not None and not (isinstance(c.dtype, torch.dtype) and c.dtype.is_floating_point):
        raise ValueError(f"dtype: expected None (auto) or a floating dtype such as {', '.join(DTYPES)}, got {c.dtype!r}")
    if c.trunk not in TRUNKS:
        raise ValueError(f"trunk={c.trunk!r}: expected None (as stored) or 'int8'")
    if not isinstance(c.seed, int) or isinstance(c.seed, bool):
        raise ValueError(f"seed: an integer, got {c.seed!r}")
    if not isinstance(c.image_limits, ImageLimits):
        raise ValueError(f"image_limits: a k3.media.ImageLimits, got {type(c.image_limits).__name__}")
    if c.prefix_cache_memory is not None and c.prefix_cache_memory >= c.cache_memory:
        raise ValueError(f"prefix_cache_memory must be in 0..cache_memory ({c.cache_memory:,} B), got "
                         f"{c.prefix_cache_memory:,}; it is taken out of cache_memory")


def _positive(name: str, value) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name}: an integer >= 1, got {value!r}")


def _json(value):
    if isinstance(value, torch.dtype):
        return str(value).removeprefix("torch.")
    if isinstance(value, SpeculativeConfig):
        return value.as_dict()
    if isinstance(value, ImageLimits):
        return dataclasses.asdict(value)
    return value
