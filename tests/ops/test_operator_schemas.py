"""The kernels as torch operators (torch.ops.k3.*, registered in ops/native/bindings.cpp): every one the
registered ops reach on their examples is checked by torch's own `opcheck` schema test, which fails when a
kernel writes to an input its schema does not mark as written ((a!)), or returns an input's storage."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from k3.ops.harness import cloned, kernels, run
from k3.ops.native import native


class Calls(TorchDispatchMode):
    """Records each k3 operator with the first arguments it was called with."""

    def __init__(self):
        super().__init__()
        self.seen = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func.namespace == "k3" and func not in self.seen:
            self.seen[func] = (cloned(args), cloned(kwargs))
        return func(*args, **kwargs)


@pytest.fixture(scope="module")
def operator_calls():
    with torch.inference_mode(False), torch.no_grad(), Calls() as calls:
        for kernel in kernels().values():
            for example in kernel.examples(False):
                run(kernel, example, True)
    return calls.seen


def test_every_operator_is_registered_and_reached():
    names = set(native().operator_names())
    assert {"bf16_linear", "kda_decode_slots", "mla_paged_decode", "mxfp4_moe_tokens"} <= names
    schema = torch.ops.k3.kda_decode_slots.default._schema
    written = {a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write}
    assert written == {"tq", "tk", "tv", "S"}


def test_each_operator_keeps_its_schema(operator_calls):
    assert len(operator_calls) >= 20, sorted(str(f) for f in operator_calls)
    for func, (args, kwargs) in operator_calls.items():
        torch.library.opcheck(func, args, kwargs, test_utils="test_schema")


def test_the_schema_check_catches_an_unmarked_write():
    """The same check fails on an operator whose schema hides an in-place write (it is not vacuous)."""
    lib = torch.library.Library("k3_schema_test", "DEF")
    lib.define("scale_(Tensor x) -> Tensor")
    lib.impl("scale_", lambda x: x.mul_(2).clone(), "CPU")
    with pytest.raises(Exception, match="mutat"):
        torch.library.opcheck(torch.ops.k3_schema_test.scale_.default, (torch.ones(3),), test_utils="test_schema")
