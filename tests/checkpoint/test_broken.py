"""Broken checkpoints raise one exception type, CheckpointError, naming the file and/or tensor."""

import json
import os
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

import k3
from k3.testing.checkpoint import rewrite_shard
from k3.checkpoint import CheckpointError

KDA0 = "language_model.model.layers.0.self_attn."
SCALE = "language_model.model.layers.1.block_sparse_moe.experts.2.w3.weight_scale"


@pytest.fixture
def ckpt(tiny_copy):
    return tiny_copy


def _index(d):
    return json.loads((d / "model.safetensors.index.json").read_text())


def _expect(d, *fragments):
    with pytest.raises(CheckpointError) as info:
        k3.load(d)
    for f in fragments:
        assert f in str(info.value), str(info.value)
    return info.value


def test_truncated_shard(ckpt):
    shard = sorted(p for p in ckpt.iterdir() if p.suffix == ".safetensors")[1]
    os.truncate(shard, shard.stat().st_size - 100)
    _expect(ckpt, shard.name, "truncated")


def test_corrupt_header(ckpt):
    shard = sorted(p for p in ckpt.iterdir() if p.suffix == ".safetensors")[0]
    data = bytearray(shard.read_bytes())
    data[10:20] = b"\xff" * 10
    shard.write_bytes(bytes(data))
    _expect(ckpt, shard.name, "corrupt")


def test_missing_tensor(ckpt):
    rewrite_shard(ckpt, KDA0 + "dt_bias", lambda t: t.pop(KDA0 + "dt_bias"))
    err = _expect(ckpt, "missing", "layers.0.self_attn.dt_bias")
    assert err.tensor == KDA0 + "dt_bias"


def test_wrong_shape(ckpt):
    name = KDA0 + "q_proj.weight"
    shard = rewrite_shard(ckpt, name, lambda t: t.__setitem__(name, t[name][:-1].clone()))
    _expect(ckpt, shard, name, "shape")


def test_wrong_dtype(ckpt):
    name = KDA0 + "o_proj.weight"
    shard = rewrite_shard(ckpt, name, lambda t: t.__setitem__(name, t[name].to(torch.int16)))
    _expect(ckpt, shard, name, "dtype I16")


def test_packed_expert_stored_as_float_is_rejected(ckpt):
    name = SCALE.replace("weight_scale", "weight_packed")
    rewrite_shard(ckpt, name, lambda t: t.__setitem__(name, t[name].to(torch.bfloat16)))
    _expect(ckpt, name, "dtype BF16 where U8")


def test_index_names_missing_file(ckpt):
    shard = sorted(p for p in ckpt.iterdir() if p.suffix == ".safetensors")[1]
    shard.unlink()
    _expect(ckpt, shard.name, "missing")


def test_index_names_tensor_absent_from_shard(ckpt):
    index = _index(ckpt)
    index["weight_map"]["language_model.model.layers.0.self_attn.ghost"] = next(iter(index["weight_map"].values()))
    (ckpt / "model.safetensors.index.json").write_text(json.dumps(index))
    _expect(ckpt, "ghost", "does not contain it")


def test_e8m0_nan_scale_byte(ckpt):
    def poison(t):
        t[SCALE] = t[SCALE].clone()
        t[SCALE][0, 0] = 255
    shard = rewrite_shard(ckpt, SCALE, poison)
    _expect(ckpt, shard, SCALE, "255")


def test_a_log_with_nonzero_padding(ckpt):
    name = KDA0 + "A_log"
    def pad(t):
        t[name] = t[name].clone()
        t[name][-1] = 0.5
    rewrite_shard(ckpt, name, pad)
    _expect(ckpt, name, "not zero")


def test_corrupt_index_json(ckpt):
    (ckpt / "model.safetensors.index.json").write_text("{not json")
    _expect(ckpt, "model.safetensors.index.json")


def test_not_a_directory(tmp_path):
    with pytest.raises((CheckpointError, ValueError)):
        k3.load(tmp_path / "nope")


def test_single_file_checkpoint_and_bare_text_names(ckpt, tmp_path):
    tensors = {}
    for shard in sorted(p for p in ckpt.iterdir() if p.suffix == ".safetensors"):
        tensors |= {k.removeprefix("language_model."): v for k, v in load_file(str(shard)).items()}
    single = tmp_path / "single"
    single.mkdir()
    save_file(tensors, str(single / "model.safetensors"))
    shutil.copy(ckpt / "config.json", single / "config.json")
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    torch.testing.assert_close(k3.load(single)(ids), k3.load(ckpt)(ids), rtol=0, atol=0)


@pytest.mark.parametrize("layout", ["exact", "4d"])
def test_a_log_exact_and_4d_layouts_load(ckpt, layout):
    """Besides K3's zero-padded [head_dim], A_log may be stored [num_heads] or [1, 1, num_heads, 1]."""
    name, heads = KDA0 + "A_log", 3
    base = k3.load(ckpt).model.layers[0].self_attn.A_log.clone()

    def narrow(t):
        a = t[name][:heads].clone()
        t[name] = a if layout == "exact" else a.reshape(1, 1, heads, 1)

    rewrite_shard(ckpt, name, narrow)
    assert torch.equal(k3.load(ckpt).model.layers[0].self_attn.A_log, base)
