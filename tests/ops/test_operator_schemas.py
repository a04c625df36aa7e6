"""The kernels as torch operators (torch.ops.k3.*, registered in ops/native/bindings.cpp): every one the
registered ops reach on their examples is checked by torch's own `opcheck`: the schema test fails when a
kernel writes to an input its schema does not mark as written ((a!)), or returns an input's storage; the
fake-tensor test fails when its fake kernel (ops/native/fake.py) gives other shapes, dtypes or strides
than the kernel; the AOT-dispatch test traces it as torch.compile does and compares the results; the
autograd-registration test fails when an input that requires grad would meet a kernel without a formula."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from k3.ops.harness import cloned, kernels, run
from k3.ops.native import MAX_ROWS, native
from k3.ops.native.fake import WITHOUT_FAKE


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


def _prefill_calls() -> dict:
    """The operators the registry reaches only for prefill-sized inputs, and only under one prefill_gemm()
    setting (this CPU's default decides which): called directly, on the registry's own example weights."""
    x, w = kernels()["bf16_linear"].examples(False)[0].args
    xq, packed, scale = kernels()["mxfp4_linear"].examples(False)[0].args
    many = MAX_ROWS + 1
    return {torch.ops.k3.bf16_widen.default: ((w,), {}),
            torch.ops.k3.bf16_gemm.default: ((x.expand(many, -1).contiguous(), w), {}),
            torch.ops.k3.mxfp4_gemm.default: ((xq.expand(many, -1).contiguous(), packed, scale), {})}


@pytest.fixture(scope="module")
def operator_calls():
    with torch.inference_mode(False), torch.no_grad(), Calls() as calls:
        for kernel in kernels().values():
            for example in kernel.examples(False):
                run(kernel, example, True)
    return {**_prefill_calls(), **calls.seen}


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


def test_every_operator_is_reached_by_an_example(operator_calls):
    """So every operator below is checked: a new one needs an example in the op registry."""
    reached = {func.name().removeprefix("k3::") for func in operator_calls}
    assert set(native().operator_names()) <= reached


def test_each_operator_has_a_fake_that_matches_its_kernel(operator_calls):
    for func, (args, kwargs) in operator_calls.items():
        if func.name().removeprefix("k3::") not in WITHOUT_FAKE:
            torch.library.opcheck(func, args, kwargs)   # every test opcheck has, the schema's included


def test_the_fakes_run_on_meta_tensors():
    """Shapes without data: the fake of a decode product and of a routed-expert bank, on the meta device."""
    x = torch.empty(5, 7168, device="meta")
    w = torch.empty(2048, 7168, dtype=torch.bfloat16, device="meta")
    assert torch.ops.k3.bf16_linear(x, w).shape == (5, 2048)
    logits = torch.empty(3, 384, device="meta")
    weights, ids = torch.ops.k3.moe_route_rows(logits, torch.empty(0, device="meta"), 8, True, 2.5)
    assert weights.shape == ids.shape == (3, 8) and ids.dtype == torch.long


def test_the_fake_check_catches_a_wrong_shape():
    """The fake-tensor check fails on an operator whose fake gives the wrong shape (it is not vacuous)."""
    lib = torch.library.Library("k3_fake_test", "DEF")
    lib.define("double_rows(Tensor x) -> Tensor")
    lib.impl("double_rows", lambda x: torch.cat([x, x]), "CPU")
    torch.library.register_fake("k3_fake_test::double_rows", lambda x: torch.empty_like(x), lib=lib)
    with pytest.raises(Exception, match="(?i)shape|size|mismatch"):
        torch.library.opcheck(torch.ops.k3_fake_test.double_rows.default, (torch.ones(3),),
                              test_utils="test_faketensor")


def test_the_schema_check_catches_an_unmarked_write():
    """The same check fails on an operator whose schema hides an in-place write (it is not vacuous)."""
    lib = torch.library.Library("k3_schema_test", "DEF")
    lib.define("scale_(Tensor x) -> Tensor")
    lib.impl("scale_", lambda x: x.mul_(2).clone(), "CPU")
    with pytest.raises(Exception, match="mutat"):
        torch.library.opcheck(torch.ops.k3_schema_test.scale_.default, (torch.ones(3),), test_utils="test_schema")


def test_a_registered_op_compiles_to_one_graph_holding_its_operator():
    """torch.compile traces the registry's choice and keeps the kernel as its torch operator (no graph
    break: the fake gives the shapes), and the compiled result is the eager one."""
    from k3.ops.linear import linear

    x, w = kernels()["bf16_linear"].examples(False)[1].args
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm

    compiled = torch.compile(lambda x, w: linear(x, w).relu(), fullgraph=True, backend=backend)
    with torch.no_grad():
        assert torch.equal(compiled(x, w), linear(x, w).relu())
    assert len(graphs) == 1 and "torch.ops.k3.bf16_linear" in graphs[0].code
