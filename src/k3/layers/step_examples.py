"""Example layers for the sublayer steps' harness entries (layers/steps.py): a layer of the tiny preset (odd
sizes) or of the `prose` preset (wider, for timing), its input projections fused as the loader fuses them,
every weight random in the dtype the loader keeps (bf16 matrices, fp32 gates, norms and conv taps, MXFP4
experts with E8M0 scales), as `k3.testing.checkpoint` draws them."""

from __future__ import annotations

import functools

import torch
from torch import nn

from k3.config.model import K3Config
from k3.config.presets import prose, tiny
from k3.layers.basic import set_tensor
from k3.layers.fused import fuse_inputs


@functools.cache
def example_config(large: bool) -> K3Config:
    return prose() if large else tiny()


def _fill(name: str, t: torch.Tensor, g: torch.Generator) -> None:
    """Draw t's values in place: codes and E8M0 scales for uint8, near-one norms, small gates, 1/sqrt(fan_in) matrices."""
    if t.dtype == torch.uint8:
        low, high = (120, 126) if name.endswith("_scale") else (0, 256)
        t.copy_(torch.randint(low, high, t.shape, generator=g, dtype=torch.uint8))
        return
    values = torch.randn(t.shape, generator=g)
    if t.dim() == 1 and "norm" in name:
        values = 1.0 + 0.2 * values
    elif t.dim() == 1 or "conv1d" in name:
        values = 0.5 * values
    else:
        values = values * t.shape[-1] ** -0.5
    t.copy_(values.to(t.dtype))


def random_layer(layer: nn.Module, seed: int) -> nn.Module:
    """`layer` with its shared-input groups fused and every weight drawn; its matrices (the Linears', the
    router's) bf16, as a checkpoint keeps them. Call once, on a new layer (the loader's job on a model)."""
    fuse_inputs(layer)
    for name, p in list(layer.named_parameters()):
        if p.dim() == 2:   # the Linears' and the router's matrices (norms, gates: 1-D; conv taps: 3-D)
            owner, _, leaf = name.rpartition(".")
            set_tensor(layer.get_submodule(owner), leaf, p.to(torch.bfloat16))
    for module in layer.modules():
        for group in getattr(module, "fused", {}).values():
            group.allocate(torch.bfloat16, torch.device("cpu"))
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, t in [*layer.named_parameters(), *layer.named_buffers()]:
            if t is not None:
                _fill(name, t, g)
    return layer
