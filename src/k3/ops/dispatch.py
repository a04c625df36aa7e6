"""The kernel registry: the one place that decides, for every op with a native kernel, whether a call runs
that kernel or the op's PyTorch reference.

Each op folder defines its reference (plain PyTorch, any device, differentiable) and its native entry,
and registers them here with a `supports` check for that op's dtypes and sizes. A call runs the native
entry only when `supports` holds and the one eligibility rule does: the kernels are built, every tensor
argument is on the CPU, and autograd is not recording through them (the kernels' results carry no
gradient, so training keeps the references). `reference_only()` (or K3_KERNELS=reference) sends every
call to the references, so whole-model tests can compare the two paths.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from k3.ops.native import native

_local = threading.local()


def _forced_reference() -> bool:
    return getattr(_local, "reference", False) or os.environ.get("K3_KERNELS") == "reference"


@contextlib.contextmanager
def reference_only() -> Iterator[None]:
    """Within the block (this thread), every registered op runs its reference."""
    before = getattr(_local, "reference", False)
    _local.reference = True
    try:
        yield
    finally:
        _local.reference = before


def _tensors(values) -> Iterator[torch.Tensor]:
    for v in values:
        if isinstance(v, torch.Tensor):
            yield v
        elif isinstance(v, (list, tuple)):
            yield from (t for t in v if isinstance(t, torch.Tensor))
        elif isinstance(v, dict):
            yield from (t for t in v.values() if isinstance(t, torch.Tensor))


def eligible(*tensors: torch.Tensor) -> bool:
    """The one rule: CPU tensors outside autograd, and the kernels built (checked last: it may build)."""
    return (not _forced_reference()
            and all(t.device.type == "cpu" for t in tensors)
            and not (torch.is_grad_enabled() and any(t.requires_grad for t in tensors))
            and native() is not None)


@dataclass(frozen=True)
class Kernel:
    name: str
    reference: Callable
    native: Callable
    supports: Callable[..., bool]   # same arguments as the op: the native entry handles these dtypes/sizes

    def use_native(self, *args, **kwargs) -> bool:
        return bool(self.supports(*args, **kwargs)) and eligible(*_tensors(args), *_tensors(kwargs.values()))

    def __call__(self, *args, **kwargs):
        impl = self.native if self.use_native(*args, **kwargs) else self.reference
        return impl(*args, **kwargs)


REGISTRY: dict[str, Kernel] = {}


def register(name: str, *, reference: Callable, native: Callable, supports: Callable[..., bool]) -> Kernel:
    if name in REGISTRY:
        raise ValueError(f"kernel {name!r} is registered twice")
    REGISTRY[name] = Kernel(name, reference, native, supports)
    return REGISTRY[name]
