"""Decode fast paths bind their weights once (layers/direct.py) and must notice any replacement."""

import pytest
import torch
from torch import nn

import k3
from k3.layers.basic import Linear
from k3.layers.direct import Taken, bound, matrix
from k3.layers.kda import KimiDeltaAttention


@pytest.mark.parametrize("checker", ["native", "interpreter"])
def test_a_binding_holds_until_something_it_took_is_replaced(monkeypatch, checker):
    """Both forms of the check (ops/native/held.cpp, and the interpreter's where the kernels are off)."""
    import k3.layers.direct as direct

    if checker == "interpreter":
        monkeypatch.setattr(direct, "native_helpers", lambda: None)
    elif direct.native_helpers() is None:
        pytest.skip("the native kernels are not built here")
    outer = nn.Module()
    outer.lin = Linear(4, 3)
    outer.lin.weight = nn.Parameter(torch.zeros(3, 4, dtype=torch.bfloat16), requires_grad=False)
    binds = []

    def bind(take: Taken):
        binds.append(1)
        return matrix(take, outer, "lin")

    first = bound(outer, bind)
    assert first is not None and bound(outer, bind) is first and len(binds) == 1
    outer.lin.weight.data.fill_(1)                     # in place: still the same objects
    assert bound(outer, bind) is first and len(binds) == 1
    outer.lin.weight = nn.Parameter(torch.ones(3, 4, dtype=torch.bfloat16), requires_grad=False)
    second = bound(outer, bind)
    assert len(binds) == 2 and second.weight is outer.lin.weight
    outer.lin.weight = nn.Parameter(torch.ones(3, 4), requires_grad=False)      # fp32: the GEMV does not take it
    assert bound(outer, bind) is None and len(binds) == 3
    outer.lin = Linear(4, 3)                             # a new submodule
    outer.lin.weight = nn.Parameter(torch.ones(3, 4, dtype=torch.bfloat16), requires_grad=False)
    assert bound(outer, bind) is not None and len(binds) == 4
    outer.lin.weight.data = torch.zeros(3, 4, dtype=torch.bfloat16)   # the same object, new storage
    assert bound(outer, bind) is not None and len(binds) == 5
    outer.lin.weight_scale = torch.ones(3, 1, dtype=torch.bfloat16)   # a name it found missing appears
    assert bound(outer, bind) is None and len(binds) == 6, "a bf16 weight with int8 scales: not the GEMV's"


def _steps(model, ids, tokens):
    state = model.new_state(1)
    out = [model(ids, state)]
    return out + [model(torch.tensor([[t]]), state) for t in tokens]


def test_decode_after_a_weight_is_replaced_uses_the_new_weight(tiny_checkpoint):
    model = k3.load(tiny_checkpoint)
    ids, tokens = torch.tensor([[3, 17, 40, 9]]), (5, 11, 1)
    with torch.inference_mode():
        before = _steps(model, ids, tokens)            # binds every layer's step
    layer = next(m for m in model.modules() if isinstance(m, KimiDeltaAttention))
    w = layer.o_proj.weight
    layer.o_proj.weight = nn.Parameter((w.float() * 1.5).to(w.dtype), requires_grad=False)
    with torch.enable_grad():
        general = _steps(model, ids, tokens)           # the dispatched forward reads the module as it is
    with torch.inference_mode():
        direct = _steps(model, ids, tokens)
    assert not torch.equal(before[-1], direct[-1])
    for a, b in zip(general, direct):
        assert torch.equal(a, b)


def test_mla_decode_falls_back_to_the_ops_when_the_paged_kernel_declines(tiny_checkpoint, monkeypatch):
    """A cache whose pool the paged kernel does not take still decodes, through the dispatched ops."""
    import types

    import k3.layers.mla as mla

    model = k3.load(tiny_checkpoint)
    ids, tokens = torch.tensor([[3, 17, 40, 9]]), (5, 11, 1)
    with torch.inference_mode():
        fast = _steps(model, ids, tokens)
    asked = []
    monkeypatch.setattr(mla, "mla_paged_decode", types.SimpleNamespace(supports=lambda *a: asked.append(1) and False))
    with torch.inference_mode():
        declined = _steps(model, ids, tokens)
    assert asked, "the fast path asked, and was declined"
    for a, b in zip(fast, declined):
        assert torch.equal(a, b)


def test_decode_after_module_float_rebinds(tiny_checkpoint):
    """Module.float() swaps each parameter's storage in place (`param.data = ...`), keeping the objects:
    the bound steps must notice, and decode then runs the general path on fp32 weights."""
    model = k3.load(tiny_checkpoint)
    ids, tokens = torch.tensor([[3, 17, 40, 9]]), (5, 11, 1)
    with torch.inference_mode():
        bf16 = _steps(model, ids, tokens)
    params = {id(p) for p in model.parameters()}
    model.float()
    assert params == {id(p) for p in model.parameters()}, "the same Parameter objects, new storage"
    with torch.inference_mode():
        widened = _steps(model, ids, tokens)
    with torch.enable_grad():
        general = _steps(model, ids, tokens)
    for a, b, c in zip(bf16, widened, general):
        assert torch.equal(b, c)
        assert torch.allclose(a, b, rtol=1e-3, atol=1e-3)
