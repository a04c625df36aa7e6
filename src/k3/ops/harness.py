"""One harness for every registered op (llama.cpp's test-backend-ops habit): each op's example inputs run
through its native entry and through its reference, and the two are compared with the one tolerance
helper; outputs and the inputs an op updates in place (state pools, accumulators) are both compared.
`tests/ops/test_op_harness.py` runs it at every instruction set; `benchmarks/ops.py` times both sides."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field

import torch

from k3.ops.dispatch import REGISTRY, Kernel, reference_only


@dataclass(frozen=True)
class Example:
    label: str
    args: tuple
    kwargs: dict = field(default_factory=dict)


def randn(*shape: int, seed: int, dtype: torch.dtype = torch.float32, scale: float = 1.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g) * scale).to(dtype)


def _fields(value) -> dict | None:
    """A dataclass instance's fields by name (a step state, layers/step_state.py); None for anything else."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    return None


def cloned(value):
    """A deep copy of the tensors in nested tuples, lists, dicts and dataclasses (each side of a comparison
    gets its own)."""
    if isinstance(value, torch.Tensor):
        return value.clone()
    if _fields(value) is not None:
        return dataclasses.replace(value, **cloned(_fields(value)))
    if isinstance(value, (list, tuple)):
        return type(value)(cloned(v) for v in value)
    if isinstance(value, dict):
        return {k: cloned(v) for k, v in value.items()}
    return value


def tensors(value) -> list[torch.Tensor]:
    """The tensors of a nested value, in order (integer ones are compared exactly)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in tensors(v)]
    if isinstance(value, dict):
        return [t for k in sorted(value) for t in tensors(value[k])]
    if _fields(value) is not None:
        return [t for v in _fields(value).values() for t in tensors(v)]
    return []


@torch.no_grad()
def run(kernel: Kernel, example: Example, native: bool):
    """(output, the inputs after the call) of one side, on its own copy of the inputs, outside autograd (as
    inference calls them: a sublayer's whole native step runs only there, ops.dispatch.decode_kernels)."""
    args, kwargs = cloned(example.args), cloned(example.kwargs)
    if native:
        if not kernel.use_native(*args, **kwargs):
            raise AssertionError(f"{kernel.name} [{example.label}]: the native entry does not take its own example")
        out = kernel.native(*args, **kwargs)
    else:
        with reference_only():
            out = kernel.reference(*args, **kwargs)
    return out, (args, kwargs)


def compare(kernel: Kernel, example: Example) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """(what, native, reference) for every output tensor and every input tensor, after both calls."""
    (n_out, n_in), (r_out, r_in) = run(kernel, example, True), run(kernel, example, False)
    outs = [(f"output {i}", a, b) for i, (a, b) in enumerate(zip(tensors(n_out), tensors(r_out)))]
    ins = [(f"input {i}", a, b) for i, (a, b) in enumerate(zip(tensors(n_in), tensors(r_in)))]
    if len(tensors(n_out)) != len(tensors(r_out)):
        raise AssertionError(f"{kernel.name} [{example.label}]: the two sides return different structures")
    return outs + ins


@torch.no_grad()
def seconds(kernel: Kernel, example: Example, native: bool, repeat: int = 5) -> float:
    """The median time of one call (inputs copied outside the timing)."""
    times = []
    for _ in range(repeat + 1):
        args, kwargs = cloned(example.args), cloned(example.kwargs)
        start = time.perf_counter()
        if native:
            kernel.native(*args, **kwargs)
        else:
            with reference_only():
                kernel.reference(*args, **kwargs)
        times.append(time.perf_counter() - start)
    return sorted(times[1:])[len(times[1:]) // 2]


# Where ops register: the kernels, and the layers' sublayer decode steps (layers/steps.py). Imported by name,
# at run time: the harness checks the layers' steps without the ops package depending on the layers.
REGISTERING_PACKAGES = ("k3.ops", "k3.layers")


def kernels() -> dict[str, Kernel]:
    """Every registered op: importing every module of REGISTERING_PACKAGES registers them (no hand-kept list
    of ops to forget one in)."""
    import importlib
    import pkgutil

    for package in REGISTERING_PACKAGES:
        path = importlib.import_module(package).__path__
        for module in pkgutil.walk_packages(path, package + "."):
            if not module.name.endswith("__main__"):    # `python -m k3.ops.native` builds the kernels
                importlib.import_module(module.name)
    return dict(sorted(REGISTRY.items()))
