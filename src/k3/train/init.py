"""A trainable K3ForCausalLM: dense (float) experts, parameters initialised, gradients on.

Initialisation: matrices N(0, 0.02), output projections scaled by 1/sqrt(2 * layers) (GPT-2);
norms 1; AttnRes pseudo-queries 0, so depth mixing starts uniform (AttnRes paper); KDA A_log =
log U(1, 16) per head and dt_bias ~ N(-1, 0.5) (slow decay at start); router correction bias 0,
moved by the balancer, never by gradients.
"""

from __future__ import annotations

import math

import torch

from k3.config import K3Config
from k3.model.k3 import K3ForCausalLM

OUTPUT_PROJECTIONS = ("o_proj.weight", "down_proj.weight", ".w2")


def trainable_config(config: K3Config) -> K3Config:
    """Training keeps experts as float tensors (export quantises them) and trains the text model alone."""
    return config.replace(expert_format=None, vision=None)


def init_model(config: K3Config, seed: int = 0) -> K3ForCausalLM:
    model = K3ForCausalLM(trainable_config(config), torch.float32)
    gen = torch.Generator().manual_seed(seed)
    out_std = 0.02 / math.sqrt(2 * config.num_hidden_layers)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(_initial(name, p, gen, out_std, config))
            p.requires_grad_(not name.endswith("e_score_correction_bias"))
    return model


def _initial(name: str, p: torch.Tensor, gen: torch.Generator, out_std: float, c: K3Config) -> torch.Tensor:
    shape = p.shape
    if name.endswith("_res_proj.weight") or name.endswith("e_score_correction_bias"):
        return torch.zeros(shape)
    if name.endswith("A_log"):
        return torch.empty(shape).uniform_(1.0, 16.0, generator=gen).log()
    if name.endswith("dt_bias"):
        return torch.randn(shape, generator=gen) * 0.5 - 1.0
    if name.endswith("conv1d.weight"):
        bound = shape[-1] ** -0.5
        return torch.empty(shape).uniform_(-bound, bound, generator=gen)
    if len(shape) == 1 or name.endswith("_res_norm.weight"):
        return torch.ones(shape)
    std = out_std if name.endswith(OUTPUT_PROJECTIONS) else 0.02
    return torch.randn(shape, generator=gen) * std
