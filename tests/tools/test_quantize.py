"""k3 quantize: BF16/FP32 experts -> official MXFP4, everything else byte for byte."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

import k3
from k3.checkpoint.reader import INDEX_FILE
from k3.cli.main import main
from k3.config import load_config
from k3.config.presets import tiny
from k3.ops.mxfp4 import dequantize, quantize
from k3.testing import assert_close, make_checkpoint
from k3.tools.quantize import DENSE_EXPERT, quantize_checkpoint
from k3.tools.verify import verify_checkpoint


def all_tensors(d):
    out = {}
    for shard in sorted(d.glob("*.safetensors")):
        out.update(load_file(str(shard)))
    return out


def snap_experts_to_grid(d):
    """Make every dense expert weight exactly MXFP4-representable (as QAT-trained weights are)."""
    for shard in sorted(d.glob("*.safetensors")):
        tensors = load_file(str(shard))
        for name, w in tensors.items():
            if DENSE_EXPERT.match(name):
                tensors[name] = dequantize(*quantize(w.float())).to(w.dtype)
        save_file(tensors, str(shard), metadata={"format": "pt"})


@pytest.fixture(scope="module")
def dense(tmp_path_factory):
    return make_checkpoint(tmp_path_factory.mktemp("dense"), tiny().replace(expert_format=None), seed=5,
                           num_shards=3)


def test_quantized_checkpoint_is_official_mxfp4_and_loads_to_the_expected_values(dense, tmp_path):
    out = tmp_path / "q"
    report = quantize_checkpoint(dense, out, log=lambda m: None)
    assert load_config(out).expert_format == "mxfp4" and verify_checkpoint(out).ok
    src, dst = all_tensors(dense), all_tensors(out)
    experts = [n for n in src if DENSE_EXPERT.match(n)]
    assert report.quantized == len(experts) > 0
    for name in experts:
        packed, scale = quantize(src[name].float())
        base = name.removesuffix("weight")
        assert torch.equal(dst[base + "weight_packed"], packed) and torch.equal(dst[base + "weight_scale"], scale)
    for name in set(src) - set(experts):
        assert torch.equal(src[name].view(torch.uint8), dst[name].view(torch.uint8)), name
    assert 0.05 < report.to_dict()["max_rel_l2"] < 0.2  # MXFP4 on Gaussian weights


def test_on_grid_weights_quantize_losslessly_and_logits_match(dense, tmp_path):
    grid = tmp_path / "grid"
    grid.mkdir()
    for p in dense.iterdir():
        (grid / p.name).write_bytes(p.read_bytes())
    snap_experts_to_grid(grid)
    report = quantize_checkpoint(grid, tmp_path / "q", log=lambda m: None)
    assert report.to_dict()["max_rel_l2"] == 0.0
    ids = torch.randint(0, tiny().vocab_size, (2, 9))
    dense_logits = k3.load(grid, dtype=torch.float32)(ids)
    packed_logits = k3.load(tmp_path / "q", dtype=torch.float32)(ids)
    assert_close("packed vs dense experts", packed_logits, dense_logits, 1e-5)


def test_quantising_dequantised_mxfp4_returns_the_original_bytes(dense, tmp_path):
    first = tmp_path / "q1"
    quantize_checkpoint(dense, first, log=lambda m: None)
    # Dequantise the MXFP4 experts back to BF16 (exact), then quantise again.
    back = tmp_path / "back"
    back.mkdir()
    for p in dense.iterdir():
        (back / p.name).write_bytes(p.read_bytes())
    q1 = all_tensors(first)
    for shard in sorted(back.glob("*.safetensors")):
        tensors = load_file(str(shard))
        for name in [n for n in tensors if DENSE_EXPERT.match(n)]:
            base = name.removesuffix("weight")
            tensors[name] = dequantize(q1[base + "weight_packed"], q1[base + "weight_scale"]).bfloat16()
        save_file(tensors, str(shard), metadata={"format": "pt"})
    quantize_checkpoint(back, tmp_path / "q2", log=lambda m: None)
    q2 = all_tensors(tmp_path / "q2")
    assert q1.keys() == q2.keys()
    assert all(torch.equal(q1[n].view(torch.uint8), q2[n].view(torch.uint8)) for n in q1)


def test_already_mxfp4_experts_pass_through_byte_identical(tiny_checkpoint, tmp_path):
    report = quantize_checkpoint(tiny_checkpoint, tmp_path / "q", log=lambda m: None)
    assert report.quantized == 0
    src, dst = all_tensors(tiny_checkpoint), all_tensors(tmp_path / "q")
    assert src.keys() == dst.keys()
    assert all(torch.equal(src[n].view(torch.uint8), dst[n].view(torch.uint8)) for n in src)


@pytest.mark.parametrize("seed", range(5))
def test_quantiser_is_idempotent_on_its_own_output(seed):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(64, 96, generator=g) * torch.exp2(torch.randint(-20, 20, (64, 1), generator=g).float())
    w[3] = 0.0
    w[5, :32] = 3.2  # rounds to code 3 at the first scale: the non-canonical case
    packed, scale = quantize(w)
    again = quantize(dequantize(packed, scale))
    assert torch.equal(again[0], packed) and torch.equal(again[1], scale)


def test_rne_ties_go_to_the_even_code():
    row = torch.tensor([[0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0] * 4])
    got = dequantize(*quantize(row))[0, :8]
    assert got.tolist() == [0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, 6.0]


def test_cli_quantize_and_refusals(dense, tmp_path, capsys):
    out = tmp_path / "q"
    assert main(["quantize", str(dense), str(out), "--experts", "mxfp4", "--report", str(tmp_path / "r.json")]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["quantized"] > 0 and (out / INDEX_FILE).is_file()
    rows = json.loads((tmp_path / "r.json").read_text())["tensors"]
    assert len(rows) == summary["quantized"] and all(r["rel_l2"] > 0 for r in rows)
    assert main(["quantize", str(dense), str(out), "--experts", "mxfp4"]) == 2  # OUT not empty
    assert "not empty" in capsys.readouterr().err


def test_nan_weight_is_reported_with_its_name(dense, tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    for p in dense.iterdir():
        (bad / p.name).write_bytes(p.read_bytes())
    shard = sorted(bad.glob("*.safetensors"))[-1]
    tensors = load_file(str(shard))
    name = next(n for n in tensors if DENSE_EXPERT.match(n))
    tensors[name][0, 0] = float("nan")
    save_file(tensors, str(shard), metadata={"format": "pt"})
    with pytest.raises(Exception, match="NaN") as info:
        quantize_checkpoint(bad, tmp_path / "q", log=lambda m: None)
    assert name in str(info.value)
    assert not list((tmp_path / "q").glob("*.safetensors.tmp"))
    with safe_open(str(sorted(dense.glob("*.safetensors"))[0]), "pt") as f:
        assert len(list(f.keys())) > 0
