"""Write a trained model in the official K3 layout: `language_model.` names, nested `text_config`,
BF16 weights, F32 recurrent-gate and norm parameters, MXFP4 experts (weight_packed + weight_scale),
A_log zero-padded to head_dim, 2+ shards with an index, and the tokenizer files beside them.

`rounded_like_export` gives the in-memory model with exactly the rounding export applies, so the
exported checkpoint can be checked against it.
"""

from __future__ import annotations

import copy
import functools
import json
import re
import shutil
from pathlib import Path

import torch

from k3.chat.tokenizer import CONFIG_FILE, VOCAB_FILE
from k3.checkpoint.layout import ExpectedTensor, expected_tensors
from k3.checkpoint.reader import TEXT_PREFIX
from k3.checkpoint.writer import atomic_write_text, groups_of, write_sharded
from k3.config import to_hf_dict
from k3.layers.experts import DenseExperts
from k3.ops.mxfp4 import dequantize, quantize

EXPERT = re.compile(r"(.*\.block_sparse_moe)\.experts\.(\d+)\.(w[123])\.(weight_packed|weight_scale|weight)$")
DTYPES = {"BF16": torch.bfloat16, "F32": torch.float32}


def export(model, out_dir: str | Path, *, tokenizer_dir: str | Path | None = None, mxfp4: bool = True,
           num_shards: int = 2) -> Path:
    out = Path(out_dir)
    config = model.config.replace(expert_format="mxfp4" if mxfp4 else None)
    state = {k: v.detach() for k, v in model.state_dict().items()}
    specs = expected_tensors(config)
    experts = _ExpertQuantizer(state)
    makers = {TEXT_PREFIX + s.name: functools.partial(_tensor, s, state, experts, config) for s in specs}
    write_sharded(out, groups_of((TEXT_PREFIX + s.name, s.nbytes) for s in specs), makers, num_shards)
    atomic_write_text(out / "config.json", json.dumps(to_hf_dict(config), indent=2))
    gen = {"max_length": 1048576, "eos_token_id": config.eos_token_id}
    atomic_write_text(out / "generation_config.json", json.dumps(gen, indent=2))
    if tokenizer_dir is not None:
        for name in (VOCAB_FILE, CONFIG_FILE):
            if (Path(tokenizer_dir) / name).is_file():
                shutil.copy(Path(tokenizer_dir) / name, out / name)
    return out


class _ExpertQuantizer:
    """Quantises one expert matrix once for its packed and scale tensors (written back to back)."""

    def __init__(self, state: dict):
        self.state, self.key, self.value = state, None, None

    def get(self, key: str, e: int, part: str) -> torch.Tensor:
        if self.key != (key, e):
            self.key, self.value = (key, e), quantize(self.state[key][e].float())
        return self.value[0] if part == "weight_packed" else self.value[1]


def _tensor(spec: ExpectedTensor, state: dict, experts: _ExpertQuantizer, config) -> torch.Tensor:
    m = EXPERT.match(spec.name)
    if m:
        key = f"{m.group(1)}.experts.{m.group(3)}"
        if m.group(4) == "weight":
            return state[key][int(m.group(2))].to(torch.bfloat16)
        return experts.get(key, int(m.group(2)), m.group(4))
    if spec.name.endswith("A_log"):
        padded = torch.zeros(spec.shape, dtype=torch.float32)
        padded[:config.kda_num_heads] = state[spec.name].float()
        return padded
    return state[spec.name].to(DTYPES[spec.dtype]).contiguous()


def rounded_like_export(model, mxfp4: bool = True):
    """A copy of `model` whose weights carry export's rounding: BF16/F32 casts, MXFP4 experts."""
    rounded = copy.deepcopy(model)
    specs = {s.name: s for s in expected_tensors(model.config)}
    with torch.no_grad():
        for name, p in rounded.named_parameters():
            spec = specs.get(name)
            if spec is not None and spec.dtype == "BF16":
                p.copy_(p.to(torch.bfloat16).float())
        for module in rounded.modules():
            if isinstance(module, DenseExperts):
                for w in (module.w1, module.w2, module.w3):
                    for e in range(w.shape[0]):
                        w[e] = dequantize(*quantize(w[e].float())) if mxfp4 else w[e].to(torch.bfloat16).float()
    return rounded
