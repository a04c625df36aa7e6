"""Projections that share an input are loaded into one matrix (layers/fused.py): same weights, same
results, and the separate Linears take over whenever the matrix no longer backs them."""

import pytest
import torch

import k3
from k3.checkpoint.reader import TEXT_PREFIX, CheckpointReader
from k3.layers.fused import SharedInput

IDS = torch.tensor([[3, 17, 40, 9, 21, 2, 33]])


def _groups(model) -> list[SharedInput]:
    return [g for m in model.modules() for g in getattr(m, "fused", {}).values()]


def _unfuse(model) -> None:
    for m in model.modules():
        if hasattr(m, "fused"):
            m.fused = {}
    model.weights_changed()


def _decode(model, steps=(5, 11, 1)) -> list[torch.Tensor]:
    state = model.new_state(1)
    out = [model(IDS, state)]
    return out + [model(torch.tensor([[t]]), state) for t in steps]


@pytest.fixture
def model(tiny_checkpoint):
    return k3.load(tiny_checkpoint)


def test_every_layer_kind_is_fused_and_weights_are_views(model, tiny_checkpoint):
    groups = _groups(model)
    kinds = {type(m).__name__ for m in model.modules() if getattr(m, "fused", None)}
    assert {"KimiDeltaAttention", "GatedMLA", "LatentMoE", "GLUMLP"} <= kinds
    reader = CheckpointReader(tiny_checkpoint)
    names = {id(m): n for n, m in model.named_modules()}
    for g in groups:
        assert g.intact()
        for lin in g.linears:
            assert lin.weight.untyped_storage().data_ptr() == g.weight.untyped_storage().data_ptr()
            stored = reader.get(f"{names[id(lin)]}.weight")
            assert torch.equal(lin.weight, stored.to(lin.weight.dtype)), names[id(lin)]
    # The MoE's group took its shared expert's gate/up, so that GLUMLP has no group of its own.
    moe = next(m for m in model.modules() if type(m).__name__ == "LatentMoE")
    assert not moe.shared_experts.fused
    assert all(k in reader for k in model.state_dict() if ".block_sparse_moe.experts." not in k)


def test_fused_equals_separate_bit_for_bit(model):
    fused = _decode(model)
    _unfuse(model)
    separate = _decode(model)
    for a, b in zip(fused, separate):
        assert torch.equal(a, b)


def test_writes_through_and_falls_back_when_replaced(model):
    reference = _decode(model)
    kda = next(m for m in model.modules() if type(m).__name__ == "KimiDeltaAttention")
    group = next(iter(kda.fused.values()))
    with torch.no_grad():
        kda.q_proj.weight.mul_(2)  # in place: the fused matrix sees it
    assert group.intact() and torch.equal(group.weight[:kda.q_proj.weight.shape[0]], kda.q_proj.weight)
    doubled = _decode(model)
    kda.q_proj.weight = torch.nn.Parameter(kda.q_proj.weight.detach().clone(), requires_grad=False)
    model.weights_changed()   # a replaced weight: the native steps bind again (layers/decode_weights.py)
    assert not group.intact()
    for a, b in zip(_decode(model), doubled):  # the Linears run one by one, on the new weight
        assert torch.equal(a, b)
    assert not torch.equal(doubled[-1], reference[-1])


def test_group_with_mixed_stored_dtypes_stays_unfused(tiny_copy):
    from safetensors.torch import load_file, save_file

    shard = sorted(tiny_copy.glob("*.safetensors"))[0]
    tensors = load_file(shard)
    name = next(n for n in tensors if n.endswith("self_attn.q_proj.weight"))
    tensors[name] = tensors[name].float()
    save_file(tensors, shard, metadata={"format": "pt"})
    model = k3.load(tiny_copy)
    layer = name.removeprefix(TEXT_PREFIX).rsplit(".", 2)[0]
    kda = model.get_submodule(layer)
    assert not kda.fused and kda.q_proj.weight.dtype == torch.float32
    other = [g for g in _groups(model) if kda.q_proj not in g.linears]
    assert other and all(g.intact() for g in other)
    assert torch.isfinite(model(IDS)).all()

