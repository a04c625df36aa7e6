"""Random checkpoints in the official K3 layout, at any size: `language_model.` names, BF16/F32/U8 dtypes,
MXFP4 experts (random codes, E8M0 scales 120-125), A_log zero-padded to head_dim, a nested
`text_config.quantization_config`, 2+ shards with an index, and the vision tower and projector when the config has one (else a few
vision tensors a text-only load must ignore).

Values are drawn so every path matters: norms and AttnRes queries are non-uniform and non-zero,
gates cover their range, matrices are scaled by 1/sqrt(fan_in). The weights are random: outputs
mean nothing.
"""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path

import torch

from k3.chat.specials import NUM_SPECIAL
from k3.checkpoint.layout import ExpectedTensor, expected_tensors
from k3.checkpoint.reader import TEXT_PREFIX
from k3.checkpoint.stream_writer import write_sharded_streaming
from k3.checkpoint.vision_layout import vision_tensors
from k3.checkpoint.writer import atomic_write_text
from k3.config import K3Config, to_hf_dict
from k3.config.presets import tiny
from k3.config.vision import MediaConfig, media_to_hf

TORCH_DTYPES = {"BF16": torch.bfloat16, "F32": torch.float32, "U8": torch.uint8}
VISION_TENSORS = {"vision_tower.patch_embed.proj.weight": (8, 3, 2, 2), "mm_projector.proj.0.weight": (8, 8)}


def make_checkpoint(out_dir: str | Path, config: K3Config | None = None, *, seed: int = 0,
                    num_shards: int = 2, with_vision: bool = True, tokenizer: bool = False,
                    tick=lambda nbytes: None) -> Path:
    """Write a random K3 checkpoint for `config` (default: `presets.tiny()`); returns the directory.
    tokenizer=True also writes tiktoken.model + tokenizer_config.json sized to the vocabulary
    (the config's eos must then be `<|end_of_msg|>`, i.e. vocab_size - 254). `tick(nbytes)` runs
    after each tensor is made (progress)."""
    config = config or tiny()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    specs = expected_tensors(config)
    makers = {TEXT_PREFIX + s.name: functools.partial(_random_tensor, s, config, seed) for s in specs}
    entries = [(TEXT_PREFIX + s.name, s.dtype, s.shape) for s in specs]
    if config.vision is not None:      # a real tower and projector, in the release's names and shapes
        for spec in vision_tensors(config.vision):
            makers[spec.name] = functools.partial(_random_tensor, spec, config, seed)
            entries.append((spec.name, spec.dtype, spec.shape))
        atomic_write_text(out / "preprocessor_config.json", json.dumps(media_to_hf(MediaConfig()), indent=2))
    elif with_vision:                  # a few stray tensors a text-only config must ignore
        for name, shape in VISION_TENSORS.items():
            makers[name] = functools.partial(_randn, shape, seed, name, torch.bfloat16)
            entries.append((name, "BF16", shape))
    # Tensor by tensor: real-dimension checkpoints (`k3 synth --preset k3`) never sit in memory whole.
    def make(name: str) -> torch.Tensor:
        t = makers[name]()
        tick(t.numel() * t.element_size())
        return t

    write_sharded_streaming(out, entries, make, num_shards=num_shards)
    atomic_write_text(out / "config.json", json.dumps(to_hf_dict(config), indent=2))
    gen = {"max_length": 1048576, "eos_token_id": config.eos_token_id}
    atomic_write_text(out / "generation_config.json", json.dumps(gen, indent=2))
    if tokenizer:
        _write_matching_tokenizer(out, config)
    return out


def pairs_with_tokenizer(config: K3Config) -> bool:
    """A byte-level test tokenizer fits: >= 256 ranks + 256 specials, and eos is <|end_of_msg|> (as released)."""
    return config.vocab_size >= 512 and config.eos_token_id == config.vocab_size - NUM_SPECIAL + 2


def _write_matching_tokenizer(out: Path, config: K3Config) -> None:
    from k3.testing.tokenizer import ranks_for_vocab, write_tokenizer

    if not pairs_with_tokenizer(config):
        raise ValueError(f"a test tokenizer needs vocab_size >= 512 and eos_token_id = <|end_of_msg|> = "
                         f"{config.vocab_size - NUM_SPECIAL + 2}; got {config.vocab_size} / {config.eos_token_id}")
    write_tokenizer(out, ranks_for_vocab(config.vocab_size))


def _generator(seed: int, name: str) -> torch.Generator:
    # Per-tensor seeds: a tensor's values do not depend on the order tensors are made in.
    return torch.Generator().manual_seed((seed * 1_000_003 + _stable_hash(name)) % (2 ** 63))


def _stable_hash(name: str) -> int:
    h = 1469598103934665603
    for ch in name.encode():
        h = ((h ^ ch) * 1099511628211) % (2 ** 64)
    return h


ROWS_AT_ONCE = 2 ** 24  # elements per block when drawing big tensors (embeddings at real size are 1.2 G)


def _randn(shape, seed: int, name: str, dtype: torch.dtype, std: float = 1.0, mean: float = 0.0) -> torch.Tensor:
    if math.prod(shape) <= ROWS_AT_ONCE or len(shape) < 2:
        return (torch.randn(shape, generator=_generator(seed, name)) * std + mean).to(dtype)
    out = torch.empty(shape, dtype=dtype)
    rows = max(1, ROWS_AT_ONCE // math.prod(shape[1:]))
    for i in range(0, shape[0], rows):  # block by block, each from its own seed: no fp32 copy of the whole
        block = torch.randn((min(rows, shape[0] - i), *shape[1:]), generator=_generator(seed, f"{name}#{i}"))
        out[i:i + rows] = block * std + mean
    return out


def _random_tensor(spec: ExpectedTensor, c: K3Config, seed: int) -> torch.Tensor:
    name, shape, dtype = spec.name, spec.shape, TORCH_DTYPES[spec.dtype]
    gen = _generator(seed, name)
    if spec.dtype == "U8":
        if name.endswith("weight_scale"):
            return torch.randint(120, 126, shape, generator=gen, dtype=torch.uint8)
        return torch.randint(0, 256, shape, generator=gen, dtype=torch.uint8)
    if name.endswith("A_log"):
        a = torch.zeros(shape, dtype=torch.float32)
        a[:c.kda_num_heads] = torch.empty(c.kda_num_heads).uniform_(0.0, 2.0, generator=gen)
        return a
    if name.endswith(("norm.weight", "layernorm.weight")) and len(shape) == 1:
        return _randn(shape, seed, name, dtype, std=0.2, mean=1.0)
    if name.endswith("conv1d.weight"):
        return _randn(shape, seed, name, dtype, std=0.5)
    if name.endswith(("dt_bias", "e_score_correction_bias")):
        return _randn(shape, seed, name, dtype, std=0.5)
    if name.endswith("embed_tokens.weight"):
        return _randn(shape, seed, name, dtype)
    fan_in = math.prod(shape[1:]) if len(shape) == 4 else shape[-1]    # a patch conv reads 3 x p x p
    return _randn(shape, seed, name, dtype, std=fan_in ** -0.5)


def rewrite_shard(checkpoint: str | Path, tensor_name: str, change) -> str:
    """Apply change(dict of tensors) to the shard holding `tensor_name` (stored name) and keep the index
    consistent with what the shard then holds (tensors added, removed or replaced). Returns the shard name.
    For tests of broken checkpoints."""
    from safetensors.torch import load_file, save_file

    from k3.checkpoint.reader import INDEX_FILE

    d = Path(checkpoint)
    index = json.loads((d / INDEX_FILE).read_text())
    shard = index["weight_map"][tensor_name]
    tensors = load_file(str(d / shard))
    change(tensors)
    save_file(tensors, str(d / shard), metadata={"format": "pt"})
    index["weight_map"] = {k: v for k, v in index["weight_map"].items() if v != shard} | {k: shard for k in tensors}
    atomic_write_text(d / INDEX_FILE, json.dumps(index))
    return shard
