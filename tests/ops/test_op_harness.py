"""Every registered op against its reference on its own example inputs, at every instruction set this CPU
runs (k3.ops.harness): outputs and the inputs an op updates in place, within the op's tolerance; integer
outputs (expert ids, int8 codes) exactly. A new op cannot register without examples the native entry takes."""

from __future__ import annotations

import pytest
import torch

from k3.ops.harness import compare, kernels
from k3.testing.tolerance import assert_close

KERNELS = kernels()


def test_the_registry_holds_every_op_with_a_native_kernel():
    assert len(KERNELS) >= 20 and all(k.examples(False) for k in KERNELS.values())


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_native_matches_reference_on_the_examples(name, level):
    kernel = KERNELS[name]
    for example in kernel.examples(False):
        for what, native, reference in compare(kernel, example):
            label = f"{name} [{example.label}] {what}"
            if native.is_floating_point():
                assert_close(label, native.double(), reference.double(), kernel.tol)
            else:
                assert torch.equal(native, reference), label


def test_the_harness_catches_a_wrong_kernel(monkeypatch):
    """A native entry that is off by a little fails its op's check (the harness is not vacuous)."""
    import dataclasses

    kernel = KERNELS["rms_norm"]
    broken = dataclasses.replace(kernel, native=lambda x, w, eps: kernel.native(x, w, eps) * (1 + 1e-4))
    example = kernel.examples(False)[0]
    worst = max(float((n - r).norm() / r.norm()) for _, n, r in compare(broken, example) if r.norm() > 0)
    assert worst > kernel.tol
