"""What a layer's native decode step reads from its modules, looked up and checked once.

Decode rows of fp32 activations skip the per-op dispatch: each layer's `_direct` calls the native
kernels its forward would pick, in the same order (so the same bits). Deciding that its weights suit
those kernels (dtypes, contiguity, fused groups intact) and fetching them through nn.Module's
attribute lookups cost about as much again as the dispatch saved: some 600 lookups and a few hundred
checks a token at 8 layers. A layer therefore binds once: `bound(module, bind)` runs `bind(taken)`,
which takes every tensor and submodule it uses through `taken` and returns a step object (or None
when the kernels do not fit), and keeps it while the modules still hold those very objects. A loader,
`set_int8`, a new Parameter or a streamed bank replaces an object, `.to()` / `.float()` give a tensor
new storage (`param.data = ...`), and the next call binds afresh; writing into a weight in place (the
loader's fused blocks) keeps the binding, as it keeps the weight's dtype, layout and storage.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from operator import eq, is_
from typing import Any

import torch
from torch import nn

from k3.ops.dispatch import native_helpers


class Taken:
    """The (dict, key, object) triples a binding read: parameters, buffers, submodules, plain attributes."""

    def __init__(self) -> None:
        self._where: list[dict] = []
        self._names: list[str] = []
        self._values: list[Any] = []
        self._tensors: list[torch.Tensor] = []
        self._storage: list[int] = []

    def _remember(self, where: dict, name: str, value: Any) -> Any:
        self._where.append(where)
        self._names.append(name)
        self._values.append(value)
        if isinstance(value, torch.Tensor):    # `.data = ...` (as Module.to does) keeps the object, not the storage
            self._tensors.append(value)
            self._storage.append(value.data_ptr())
        return value

    def __call__(self, module: nn.Module, name: str) -> Any:
        """module.<name> (None when it has none), remembered so `still_held` can tell if it changes."""
        for where in (module._parameters, module._buffers, module._modules, module.__dict__):
            if name in where:
                return self._remember(where, name, where[name])
        return self._remember(module.__dict__, name, None)

    def freeze(self) -> None:
        """Done taking: the record becomes tuples, as the native check reads them."""
        self._where, self._names, self._values = tuple(self._where), tuple(self._names), tuple(self._values)
        self._tensors, self._storage = tuple(self._tensors), tuple(self._storage)

    def still_held(self) -> bool:
        """Asked before every decode step of every layer (a few dozen reads, their objects evicted by the
        weight streams since the last step): natively, where the misses overlap (ops/native/held.cpp),
        else the same test in the interpreter."""
        kernels = native_helpers()
        if kernels is not None and isinstance(self._where, tuple):
            return kernels.objects_held(self._where, self._names, self._values, self._tensors, self._storage)
        return (all(map(is_, map(dict.get, self._where, self._names), self._values))
                and all(map(eq, map(torch.Tensor.data_ptr, self._tensors), self._storage)))


def bound(module: nn.Module, bind: Callable[[Taken], Any]) -> Any:
    """`module`'s decode step: the cached result of bind(taken) while everything it took is still held
    (one cache per bind method, by name)."""
    cache = module.__dict__.setdefault("_direct_bindings", {})
    cached = cache.get(bind.__name__)
    if cached is not None and cached[0].still_held():
        return cached[1]
    taken = Taken()
    step = bind(taken)
    taken.freeze()
    cache[bind.__name__] = (taken, step)
    return step


_NO_SCALE = torch.empty(0)


@dataclass(frozen=True)
class Matrix:
    """A Linear's weight as the native decode GEMV reads it: bf16 [out, in], or int8 codes with their
    bf16 scales [out, ceil(in / 32)]."""
    weight: torch.Tensor
    scale: torch.Tensor | None

    @property
    def pair(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(weight, scale) as the native layer steps take a matrix: an empty scale for bf16."""
        return self.weight, _NO_SCALE if self.scale is None else self.scale

    def __call__(self, kernels, x: torch.Tensor) -> torch.Tensor:
        """x fp32 [N, in] (decode rows) -> [N, out]."""
        if self.scale is None:
            return kernels.bf16_linear(x, self.weight)
        return kernels.int8_linear(x, self.weight, self.scale)


def matrix(take: Taken, module: nn.Module, name: str) -> Matrix | None:
    """Linear `module.<name>` for the native GEMV, when its weights suit it as they are."""
    lin = take(module, name)
    if lin is None:
        return None
    w, scale = take(lin, "weight"), take(lin, "weight_scale")
    if scale is None:
        ok = w.dtype == torch.bfloat16 and w.is_contiguous()
    else:
        ok = w.dtype == torch.int8 and scale.dtype == torch.bfloat16 and w.is_contiguous() and scale.is_contiguous()
    return Matrix(w, scale) if ok and not w.requires_grad else None


@dataclass(frozen=True)
class FusedMatrix:
    """A fused group (layers/fused.py) for the native GEMV: one matrix, whose product the native steps
    split into the members' outputs of widths `sizes`."""
    matrix: Matrix
    sizes: tuple[int, ...]


def fused_matrix(take: Taken, module: nn.Module, names: tuple[str, ...]) -> FusedMatrix | None:
    """The group `names` of `module`, when the loader fused it, it is still intact, and its matrix suits
    the native GEMV."""
    fused = take(module, "_fused")
    group = fused.get(names) if fused is not None else None
    if group is None:
        return None
    for lin in group.linears:  # held by identity from now on: a replaced member unfuses the group
        take(lin, "weight"), take(lin, "weight_scale")
    w = group.weight
    ok = (group.intact() and w.is_contiguous()
          and w.dtype == (torch.bfloat16 if group.scale is None else torch.int8))
    return FusedMatrix(Matrix(w, group.scale), tuple(group.sizes)) if ok else None


def float_weights(take: Taken, module: nn.Module, names: tuple[str, ...],
                  dtypes: tuple[torch.dtype, ...] = (torch.float32,)) -> list[torch.Tensor] | None:
    """`module.<name>.weight` (or the tensor `module.<name>` itself) for each name, when every one is
    contiguous and of one of `dtypes`."""
    out = []
    for name in names:
        t = take(module, name)
        if isinstance(t, nn.Module):
            t = take(t, "weight")
        if t is None or t.dtype not in dtypes or not t.is_contiguous():
            return None
        out.append(t)
    return out
