"""What the training log records besides loss: per-layer gradient norms, hidden-state RMS by depth,
expert load balance, and the router-bias update that balances it (auxiliary-loss-free)."""

from __future__ import annotations

import re

import torch

from k3.layers.moe import LatentMoE

_LAYER = re.compile(r"model\.layers\.(\d+)\.")


def grad_norms_by_layer(model) -> dict[str, float]:
    sums: dict[str, float] = {}
    for name, p in model.named_parameters():
        if p.grad is None:
            continue
        m = _LAYER.match(name)
        key = f"layer{int(m.group(1)):02d}" if m else name.split(".")[-2] if "." in name else name
        sums[key] = sums.get(key, 0.0) + float(p.grad.detach().double().pow(2).sum())
    return {k: v ** 0.5 for k, v in sorted(sums.items())}


class HiddenRMS:
    """RMS of every decoder layer's output, recorded while `active`."""

    def __init__(self, model):
        self.active, self.values = False, {}
        for i, layer in enumerate(model.model.layers):
            layer.register_forward_hook(self._hook(i))

    def _hook(self, i: int):
        def record(module, inputs, output):
            if self.active:
                self.values[i] = float(output.detach().float().pow(2).mean().sqrt())
        return record


def moe_layers(model) -> list[LatentMoE]:
    return [m for m in model.modules() if isinstance(m, LatentMoE)]


def collect_loads(model) -> list[torch.Tensor]:
    return [m.last_load.clone() for m in moe_layers(model)]


def balance_routers(model, loads: list[torch.Tensor], rate: float) -> list[float]:
    """b_e += rate * sign(mean load - load_e); returns max/mean load per MoE layer."""
    ratios = []
    with torch.no_grad():
        for moe, load in zip(moe_layers(model), loads):
            load = load.float()
            moe.gate.e_score_correction_bias += rate * torch.sign(load.mean() - load)
            ratios.append(float(load.max() / load.mean().clamp_min(1e-9)))
    return ratios
