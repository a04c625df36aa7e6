"""Projections that read the same input, multiplied as one matrix.

KDA's q/k/v/gate/f_a/beta projections all read the layer's normalised input, as do MLA's q_a/kv_a/
gate, the dense MLP's gate/up and the MoE's latent down-projection with the shared expert's gate/up.
At batch 1 each is a GEMV that streams its weight once; one [sum(out), in] matrix instead of six
separate ones keeps the memory system busy without a restart per call and pays Python's per-call cost
once (benchmarks/decode_profile.py).

The loader allocates the matrix and reads each checkpoint tensor straight into its row block
(`SharedInput.allocate`); each Linear's weight is a view of that block, so nothing is held twice,
`state_dict()` is unchanged, and writing into any Linear's weight lands in the matrix. If a weight is
replaced instead (`.to()`, a new Parameter), the group notices (its views no longer match) and the
Linears run one by one. Every output is summed exactly as the separate product sums it (the native
kernel's per-output order does not depend on the matrix's height), so fused and separate agree bit
for bit there.
"""

from __future__ import annotations

import torch
from torch import nn

from k3.ops import huge_pages
from k3.ops.int8 import int8_linear, scale_shape
from k3.ops.linear import linear


class SharedInput:
    """Linears `names` of `module` (dotted paths), fused into one matrix.

    With an int8 trunk the matrix holds int8 codes and `scale` their bf16 scales [sum(out), groups],
    each Linear's `weight_scale` a row block of it (int8 groups run along a row, so stacking rows keeps
    every member's quantisation as it is)."""

    def __init__(self, module: nn.Module, names: tuple[str, ...]):
        self.linears = [module.get_submodule(n) for n in names]
        self.sizes = [lin.weight.shape[0] for lin in self.linears]
        self.weight: torch.Tensor | None = None
        self.scale: torch.Tensor | None = None

    def allocate(self, dtype: torch.dtype, device: torch.device) -> list[torch.Tensor]:
        """The matrix, uninitialised; each Linear's weight becomes its row block. Returns the blocks
        (int8: the code blocks; `scale_blocks()` gives the scale blocks)."""
        inputs = {lin.weight.shape[1] for lin in self.linears}
        if len(inputs) != 1:
            raise ValueError(f"projections read different widths {sorted(inputs)}")
        width = inputs.pop()
        self.weight = huge_pages.empty((sum(self.sizes), width), dtype, device)
        blocks = list(self.weight.split(self.sizes))
        scales = [None] * len(blocks)
        if dtype == torch.int8:
            self.scale = huge_pages.empty(scale_shape(sum(self.sizes), width), torch.bfloat16, device)
            scales = list(self.scale.split(self.sizes))
        for lin, block, scale in zip(self.linears, blocks, scales):
            lin._parameters["weight"] = nn.Parameter(block, requires_grad=False)
            lin._buffers["weight_scale"] = scale
        self._ptrs = [(b.data_ptr(), None if sc is None else sc.data_ptr()) for b, sc in zip(blocks, scales)]
        return blocks

    def scale_blocks(self) -> list[torch.Tensor]:
        return [lin._buffers["weight_scale"] for lin in self.linears]

    def intact(self) -> bool:
        if self.weight is None:
            return False
        for lin, (p, sp) in zip(self.linears, self._ptrs):  # asked every decode step of every layer: no __getattr__
            w, scale = lin._parameters.get("weight"), lin._buffers.get("weight_scale")
            if w is None or w.data_ptr() != p or w.requires_grad or (None if scale is None else scale.data_ptr()) != sp:
                return False
        return True

    def _product(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight) if self.scale is None else int8_linear(x, self.weight, self.scale)

    def __call__(self, x: torch.Tensor) -> list[torch.Tensor]:
        """x [..., in] -> one [..., out_i] per Linear (contiguous)."""
        if not self.intact() or (torch.is_grad_enabled() and x.requires_grad):
            return [lin(x) for lin in self.linears]
        parts = self._product(x).split(self.sizes, dim=-1)
        return [p if p.is_contiguous() else p.contiguous() for p in parts]


def fuse_inputs(model: nn.Module) -> None:
    """Attach a SharedInput for each group a layer declares (`shared_inputs()`: tuples of Linear
    names) to its `fused` dict; the loader then allocates and fills them (and calls the model's
    `weights_changed()` once every weight is in place)."""
    claimed = set()
    for module in model.modules():  # parents first: the MoE's group takes its shared expert's gate/up
        declared = getattr(module, "shared_inputs", None)
        if declared is None:
            continue
        module.fused = {}
        for names in declared():
            group = SharedInput(module, names)
            if claimed.isdisjoint(map(id, group.linears)):
                claimed.update(map(id, group.linears))
                module.fused[names] = group


def project(module: nn.Module, names: tuple[str, ...], x: torch.Tensor) -> list[torch.Tensor]:
    """The Linears `names` of `module` applied to x: one matmul when the loader fused them."""
    group = module.fused.get(names)
    if group is not None:
        return group(x)
    return [module.get_submodule(n)(x) for n in names]
