"""`speculative_config`: vLLM's names and meanings, validated once, with errors that name the key."""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass

METHODS = ("ngram", "draft_model")
MAX_SPECULATIVE_TOKENS = 16   # a window is 1 + k rows: kept within the decode kernels' row range
KEYS = ("method", "num_speculative_tokens", "prompt_lookup_max", "prompt_lookup_min", "model",
        "disable_by_batch_size", "draft_tensor_parallel_size", "acceptance_method")


@dataclass(frozen=True)
class SpeculativeConfig:
    method: str                        # "ngram" (prompt lookup) or "draft_model"
    num_speculative_tokens: int        # k: drafts per step at most
    prompt_lookup_max: int = 5         # ngram: longest suffix looked up
    prompt_lookup_min: int = 5         # ngram: shortest
    model: object = None               # draft_model: a checkpoint path, or a loaded model
    disable_by_batch_size: int | None = None   # no drafting while this many requests (or more) are running

    @classmethod
    def parse(cls, value) -> "SpeculativeConfig | None":
        """A dict, a JSON string, a SpeculativeConfig or None (off) -> the config (or None)."""
        if value is None or isinstance(value, SpeculativeConfig):
            return value
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError as e:
                raise ValueError(f"speculative_config: not valid JSON ({e.msg} at character {e.pos}): {value!r}") from None
        if not isinstance(value, dict):
            raise ValueError(f"speculative_config must be a JSON object / dict, got {type(value).__name__}")
        unknown = sorted(set(value) - set(KEYS))
        if unknown:
            raise ValueError(f"speculative_config: unknown key(s) {', '.join(unknown)}; k3 takes {', '.join(KEYS)}")
        d = dict(value)
        if d.pop("draft_tensor_parallel_size", None) not in (None, 1):
            raise ValueError("speculative_config.draft_tensor_parallel_size: k3 runs the drafter on one device (1)")
        if d.pop("acceptance_method", None) not in (None, "rejection_sampler"):
            raise ValueError('speculative_config.acceptance_method: k3 verifies with "rejection_sampler" only')
        limit = d.pop("disable_by_batch_size", None)
        if limit is not None and (not _is_int(limit) or limit < 1):
            raise ValueError(f"speculative_config.disable_by_batch_size: an integer >= 1, got {limit!r}")
        config = cls._from_dict(d)
        return config if limit is None else dataclasses.replace(config, disable_by_batch_size=limit)

    @classmethod
    def _from_dict(cls, d: dict) -> "SpeculativeConfig":
        method = d.get("method")
        if method is None:   # vLLM's older spelling: "model": "[ngram]"; a model alone means a draft model
            method = "ngram" if d.get("model") in ("ngram", "[ngram]") else "draft_model" if d.get("model") else None
            if method == "ngram":
                d.pop("model")
        if method not in METHODS:
            raise ValueError(f"speculative_config.method: expected one of {', '.join(METHODS)}, got {method!r}")
        k = d.get("num_speculative_tokens")
        if not _is_int(k) or not 1 <= k <= MAX_SPECULATIVE_TOKENS:
            raise ValueError(f"speculative_config.num_speculative_tokens: an integer in 1..{MAX_SPECULATIVE_TOKENS} "
                             f"is required, got {k!r}")
        if method == "draft_model":
            if d.get("model") in (None, ""):
                raise ValueError('speculative_config: method "draft_model" needs "model": a K3-architecture '
                                 "checkpoint with the target's tokenizer")
            extra = [key for key in ("prompt_lookup_max", "prompt_lookup_min") if key in d]
            if extra:
                raise ValueError(f"speculative_config: {', '.join(extra)} apply to method \"ngram\" only")
            return cls(method, k, model=d["model"])
        if d.get("model") is not None:
            raise ValueError('speculative_config: method "ngram" drafts from the request itself; drop "model"')
        lo, hi = d.get("prompt_lookup_min"), d.get("prompt_lookup_max")
        lo, hi = (5, 5) if lo is None and hi is None else (lo if lo is not None else hi, hi if hi is not None else lo)
        for name, v in (("prompt_lookup_min", lo), ("prompt_lookup_max", hi)):
            if not _is_int(v) or v < 1:
                raise ValueError(f"speculative_config.{name}: an integer >= 1 is required, got {v!r}")
        if lo > hi:
            raise ValueError(f"speculative_config: prompt_lookup_min ({lo}) is more than prompt_lookup_max ({hi})")
        return cls(method, k, prompt_lookup_max=hi, prompt_lookup_min=lo)

    def as_dict(self) -> dict:
        """vLLM's dict for this config (what `parse` reads back; a loaded draft model shows as its type)."""
        if self.method == "draft_model":
            model = self.model if isinstance(self.model, (str, os.PathLike)) else type(self.model).__name__
            d = {"method": self.method, "num_speculative_tokens": self.num_speculative_tokens, "model": str(model)}
        else:
            d = {"method": self.method, "num_speculative_tokens": self.num_speculative_tokens,
                 "prompt_lookup_max": self.prompt_lookup_max, "prompt_lookup_min": self.prompt_lookup_min}
        if self.disable_by_batch_size is not None:
            d["disable_by_batch_size"] = self.disable_by_batch_size
        return d

    def describe(self) -> str:
        if self.method == "ngram":
            return (f"ngram (prompt lookup {self.prompt_lookup_min}..{self.prompt_lookup_max} tokens), "
                    f"{self.num_speculative_tokens} drafts")
        return f"draft model {self.model}, {self.num_speculative_tokens} drafts"


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)
