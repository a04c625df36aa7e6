"""The kernel registry: the one place that decides, for every op with a native kernel, whether a call runs
that kernel or the op's PyTorch reference.

Each op folder defines its reference (plain PyTorch, any device, differentiable) and its native entry,
and registers them here with a `supports` check for that op's dtypes and sizes. A call runs the native
entry only when `supports` holds and the one eligibility rule does: the kernels are built, every tensor
argument is on the CPU, and autograd is not recording through them (the kernels' results carry no
gradient, so training keeps the references). `reference_only()` (or K3_KERNELS=reference, read at
import) sends every call to the references, so whole-model tests can compare the two paths. The
check runs on every call of a decode step, so it is kept to a few attribute reads.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from k3.config import env
from k3.ops.native import MAX_ROWS, native

_local = threading.local()
_REFERENCE_BY_ENV = env.read("K3_KERNELS") == "reference"


def _forced_reference() -> bool:
    return _REFERENCE_BY_ENV or getattr(_local, "reference", False)


@contextlib.contextmanager
def reference_only() -> Iterator[None]:
    """Within the block (this thread), every registered op runs its reference."""
    before = getattr(_local, "reference", False)
    _local.reference = True
    try:
        yield
    finally:
        _local.reference = before


def _outside_autograd_on_cpu(values, grad: bool) -> bool:
    for v in values:
        if isinstance(v, torch.Tensor):
            if not v.is_cpu or (grad and v.requires_grad):
                return False
        elif isinstance(v, (list, tuple, dict)) and not _outside_autograd_on_cpu(
                v.values() if isinstance(v, dict) else v, grad):
            return False
    return True


def eligible(args: tuple, kwargs: dict) -> bool:
    """The one rule, over a call's arguments (tensors, or lists/tuples/dicts of them): not forced to the
    references, every tensor on the CPU and outside autograd, and the kernels built (checked last: it
    may build)."""
    if _forced_reference():
        return False
    grad = torch.is_grad_enabled()
    return (_outside_autograd_on_cpu(args, grad) and (not kwargs or _outside_autograd_on_cpu(kwargs.values(), grad))
            and native() is not None)


def prepare() -> bool:
    """Build (once) and load the native kernels now, where the caller can afford the wait: a model being
    loaded, not a request being timed. -> whether they are available."""
    return not _forced_reference() and native() is not None


def loaded_kernels():
    """The native kernels, for the native entry of an op registered outside k3.ops (a sublayer's decode step:
    layers/steps.py), which runs only once `use_native` chose it, so they are built."""
    return native()


def decode_kernels(x: torch.Tensor):
    """The native kernels (`native()`) when decode rows x [N <= MAX_ROWS, D] (fp32, CPU) may run the decode
    plan's native steps (model/plan_binding.py), else None: the one rule above (`eligible`), and autograd
    off altogether, since a whole native step records nothing for autograd to follow, whatever its inputs.
    None under torch.compile too: the plan's bound steps are C++ objects a trace cannot follow, while op by
    op every kernel is a torch operator with a fake kernel (ops/native/fake.py), so the graph holds them."""
    if torch.compiler.is_compiling() or torch.is_grad_enabled():
        return None
    if x.dtype != torch.float32 or x.dim() != 2 or x.shape[0] > MAX_ROWS:
        return None
    return native() if eligible((x,), {}) else None


@dataclass(frozen=True)
class Kernel:
    name: str
    reference: Callable
    native: Callable
    supports: Callable[..., bool]   # same arguments as the op: the native entry handles these dtypes/sizes
    examples: Callable[[bool], list]  # examples(large) -> k3.ops.harness.Example's: tiny odd sizes, or K3's
    tol: float                        # native vs reference, relative L2, on the examples (default 1e-5: fp32
                                      # sums in another order at K3's widths, ~sqrt(7168) x 2^-24)

    def use_native(self, *args, **kwargs) -> bool:
        return not _forced_reference() and bool(self.supports(*args, **kwargs)) and eligible(args, kwargs)

    def __call__(self, *args, **kwargs):
        impl = self.native if self.use_native(*args, **kwargs) else self.reference
        return impl(*args, **kwargs)


REGISTRY: dict[str, Kernel] = {}


def register(name: str, *, reference: Callable, native: Callable, supports: Callable[..., bool],
             examples: Callable[[bool], list], tol: float = 1e-5) -> Kernel:
    """An op with a native kernel. `examples(large)` gives inputs the native entry supports, so one harness
    (k3.ops.harness; tests/ops/test_op_harness.py, benchmarks/ops.py) checks every op against its reference
    at every instruction set and times both."""
    if name in REGISTRY:
        raise ValueError(f"kernel {name!r} is registered twice")
    REGISTRY[name] = Kernel(name, reference, native, supports, examples, tol)
    return REGISTRY[name]
