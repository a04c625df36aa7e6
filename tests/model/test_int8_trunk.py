"""An int8 trunk, quantised at load (trunk="int8") or written by `k3 quantize --trunk int8`: the model
computes exactly the model whose matrices are the dequantised ones, both ways give the same tensors,
the decode kernels agree with the references, and a broken derived checkpoint is refused."""

from __future__ import annotations

import errno
import os

import pytest
import torch

import k3
from k3.checkpoint import CheckpointError
from k3.checkpoint.layout import expected_tensors, int8_target
from k3.cli.main import main
from k3.config import load_config
from k3.config.presets import tiny7
from k3.engine import LLM, SamplingParams
from k3.ops.dispatch import reference_only
from k3.streaming.trunk import layer_stream_specs
from k3.ops.int8 import Int8FormatError, dequantize, quantize
from k3.testing import assert_close, make_checkpoint
from k3.testing.checkpoint import rewrite_shard
from k3.tools.quantize_trunk import quantize_trunk
from k3.tools.verify import verify_checkpoint

# 328 inputs: ten whole groups of 32 and a short one; 7 layers of matrices of many pages, so that even
# the int8 trunk is worth streaming under a small budget
CONFIG = tiny7(hidden_size=328, num_experts=13)
TARGETS = sorted(s.name for s in expected_tensors(CONFIG) if int8_target(s))


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return make_checkpoint(tmp_path_factory.mktemp("bf16"), CONFIG, seed=4, num_shards=3)


@pytest.fixture(scope="module")
def derived(ckpt, tmp_path_factory):
    out = tmp_path_factory.mktemp("int8") / "q"
    quantize_trunk(ckpt, out, log=lambda m: None)
    return out


def ids(n: int, batch: int = 2) -> torch.Tensor:
    return torch.randint(0, CONFIG.vocab_size, (batch, n), generator=torch.Generator().manual_seed(n))


def dequantised_fp32_model(ckpt, layers=None):
    """The exact model an int8 trunk stands for: fp32, every target matrix (of `layers`, default all)
    replaced by q * scale."""
    stored = k3.load(ckpt)
    model = k3.load(ckpt, dtype=torch.float32)
    for name in TARGETS:
        if layers is None or int(name.split(".")[2]) in layers:
            model.get_parameter(name).copy_(dequantize(*quantize(stored.get_parameter(name))))
    return model


def test_int8_at_load_computes_the_dequantised_model(ckpt):
    model = k3.load(ckpt, trunk="int8")
    for name in TARGETS:
        lin = model.get_submodule(name.rpartition(".")[0])
        assert lin.weight.dtype == torch.int8 and lin.weight_scale.dtype == torch.bfloat16, name
    assert model.get_parameter("model.layers.3.self_attn.kv_b_proj.weight").dtype == torch.bfloat16
    fused = [g for m in model.modules() for g in getattr(m, "fused", {}).values()]
    assert fused and all(g.intact() and g.weight.dtype == torch.int8 for g in fused)
    exact = dequantised_fp32_model(ckpt)
    with torch.inference_mode():
        long, short = ids(40), ids(5)   # 80 rows: dequantise + GEMM; 10 rows: the int8 GEMV
        assert_close("prefill", model(long), exact(long), 1e-5)
        # The GEMV rounds activations to int16 per 32 inputs (2^-16 of each group's largest): about 3e-5 a
        # product, 2e-4 through this random model; the int8 weights themselves move it 1e-2 (below).
        assert_close("few rows", model(short), exact(short), 1e-3)
        with reference_only():
            assert_close("reference", model(short), exact(short), 1e-5)


def test_int8_trunk_stays_close_on_the_trained_model():
    """On trained weights (the bundled model) an int8 trunk moves the logits little; a random model is
    no judge of that (its routing flips under any perturbation). The README's table measures more."""
    from k3.defaults import default_model

    x = torch.randint(0, 4096, (1, 48), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        bf16, int8 = k3.load(default_model())(x), k3.load(default_model(), trunk="int8")(x)
    assert_close("int8 against bf16", int8, bf16, 2e-2)
    assert float((int8.argmax(-1) == bf16.argmax(-1)).float().mean()) >= 0.9


def test_derived_checkpoint_holds_the_same_tensors_and_links_the_shards(ckpt, derived):
    assert load_config(derived).trunk_format == "int8"
    report = verify_checkpoint(derived)     # the linked shards' superseded bf16 matrices are expected
    assert report.ok and not report.warnings, str(report)
    at_load, stored = k3.load(ckpt, trunk="int8"), k3.load(derived)
    a, b = at_load.state_dict(), stored.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert sum(k.endswith("weight_scale") for k in b) == len(TARGETS)
    assert torch.equal(at_load(ids(9)), stored(ids(9)))
    for shard in ckpt.glob("model-*.safetensors"):
        assert os.stat(derived / shard.name).st_ino == os.stat(shard).st_ino   # hard link, no bytes
    int8_bytes = sum(p.stat().st_size for p in derived.glob("int8-*.safetensors"))
    bf16_bytes = sum(s.nbytes for s in expected_tensors(CONFIG) if s.name in TARGETS)
    codes_and_scales = sum(s.nbytes for s in expected_tensors(load_config(derived))
                           if s.name.removesuffix("_scale") in TARGETS)
    assert codes_and_scales < 0.6 * bf16_bytes and codes_and_scales < int8_bytes < codes_and_scales + 3 * 2 ** 16
    assert k3.load(derived, trunk="int8").state_dict().keys() == b.keys()   # int8 already: nothing more


def test_decode_kernels_agree_with_the_references(derived):
    params = SamplingParams(max_tokens=8, temperature=0.0, logprobs=2, ignore_eos=True)
    prompts = [[1, 2, 3, 4, 5], [9, 8, 7], [11] * 37]
    llm = LLM(str(derived), max_num_seqs=3, cache_memory="4MiB")
    native = llm.generate(prompts, params)
    with reference_only():
        reference = llm.generate(prompts, params)
    for a, b in zip(native, reference):
        assert a.token_ids == b.token_ids
        for la, lb in zip(a.logprobs, b.logprobs):   # the GEMV's int16 activations (see above)
            assert abs(la.logprob - lb.logprob) < 1e-2


def test_streamed_int8_layers_are_bit_identical_to_resident(derived):
    from k3.streaming import minimum_budget

    config = load_config(derived)
    resident = k3.load(derived)
    model = k3.load(derived, memory_budget=minimum_budget(config))
    plan = model.memory_plan
    assert plan.mode == "stream-trunk" and len(plan.streamed_layers) == config.num_hidden_layers
    assert model.get_parameter(TARGETS[0]).dtype == torch.int8
    x = ids(13)
    assert torch.equal(resident(x), model(x))


def test_int8_at_load_with_streamed_layers_keeps_those_as_stored(ckpt):
    from k3.streaming import minimum_budget

    floor = minimum_budget(CONFIG, int8_at_load=True)
    assert floor == minimum_budget(CONFIG)          # nothing resident is quantised when every layer streams
    held = [sum(s.nbytes for s in specs) for specs in layer_stream_specs(CONFIG.replace(trunk_format="int8")).values()]
    model = k3.load(ckpt, trunk="int8", memory_budget=floor + max(held))
    plan = model.memory_plan
    assert plan.int8_at_load and plan.resident_bytes <= plan.budget
    kept = set(range(CONFIG.num_hidden_layers)) - set(plan.streamed_layers)
    assert kept and plan.streamed_layers
    for name in TARGETS:
        layer = int(name.split(".")[2])
        assert model.get_parameter(name).dtype == (torch.int8 if layer in kept else torch.bfloat16), name
    with torch.inference_mode():
        # The streamed bf16 layers' prefill runs the native GEMM on AVX2-only CPUs (one FMA chain per
        # 256-deep block; 1.5e-5 measured there) where the fp32 model runs MKL's: summation order only.
        assert_close("mixed", model(ids(40)), dequantised_fp32_model(ckpt, kept)(ids(40)), 3e-5)


def test_broken_derived_checkpoints_are_refused(derived, tmp_path):
    import shutil

    for shard in derived.iterdir():
        shutil.copyfile(shard, tmp_path / shard.name)
    name = next(n for n in TARGETS if "layers.1." in n)

    key = "language_model." + name + "_scale"

    def poison(tensors):
        tensors[key] = tensors[key].clone()
        tensors[key].view(-1)[3] = float("nan")

    rewrite_shard(tmp_path, key, poison)
    with pytest.raises(CheckpointError, match="negative, inf or NaN") as e:
        k3.load(tmp_path)
    assert name in str(e.value)
    rewrite_shard(tmp_path, key, lambda tensors: tensors.update({key: tensors[key].float().abs()}))
    with pytest.raises(CheckpointError, match="dtype F32 where BF16"):
        k3.load(tmp_path)


def test_quantize_cli_refusals_and_copy(ckpt, derived, tmp_path, monkeypatch, capsys):
    assert main(["quantize", str(ckpt), str(tmp_path / "a")]) == 2
    assert "give one of" in capsys.readouterr().err
    assert main(["quantize", str(derived), str(tmp_path / "b"), "--trunk", "int8"]) == 2
    assert "already has an int8 trunk" in capsys.readouterr().err

    def cross_device(src, dst):
        raise OSError(errno.EXDEV, os.strerror(errno.EXDEV))

    monkeypatch.setattr(os, "link", cross_device)
    assert main(["quantize", str(ckpt), str(tmp_path / "c"), "--trunk", "int8"]) == 2
    assert "--copy" in capsys.readouterr().err
    assert main(["quantize", str(ckpt), str(tmp_path / "d"), "--trunk", "int8", "--copy"]) == 0
    copied = k3.load(tmp_path / "d").state_dict()
    assert all(torch.equal(v, copied[k]) for k, v in k3.load(derived).state_dict().items())


def test_a_replaced_int8_member_unfuses_its_group(ckpt):
    model = k3.load(ckpt, trunk="int8")
    group = next(g for m in model.modules() for g in getattr(m, "fused", {}).values())
    x = torch.randn(3, group.weight.shape[1])
    lin = group.linears[0]
    q, scale = quantize(torch.randn(lin.weight.shape) * 0.1)
    with pytest.raises(Int8FormatError, match="do not fit"):
        lin.set_int8(q, scale[:, :1])
    with pytest.raises(Int8FormatError, match="for a"):
        lin.set_int8(*quantize(torch.randn(lin.weight.shape[0] + 1, lin.weight.shape[1])))
    assert group.intact()                        # refused pairs change nothing
    lin.set_int8(q, scale)                       # new codes and scales: the fused matrix no longer holds them
    assert not group.intact()
    assert torch.equal(group(x)[0], lin(x))
    with torch.inference_mode():
        assert_close("replaced member", lin(x), x @ dequantize(q, scale).T, 1e-4)


def test_verify_accepts_only_the_superseded_names(derived, tmp_path):
    """Without the index's list of superseded names, the linked shards' bf16 matrices are what they
    would be in a checkpoint from two revisions: tensors the index does not place there."""
    import json
    import shutil

    for f in derived.iterdir():
        shutil.copyfile(f, tmp_path / f.name)
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    dropped = index["metadata"]["superseded"].pop()
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    report = verify_checkpoint(tmp_path)
    assert not report.ok and [p.tensor for p in report.problems if p.kind == "index-mismatch"] == [dropped]


def test_the_planner_holds_an_int8_checkpoint_as_stored():
    from k3.streaming import minimum_budget, plan_memory

    stored = CONFIG.replace(trunk_format="int8")
    budget = minimum_budget(stored) + 10 ** 6
    asked, plain = plan_memory(stored, budget, int8_at_load=True), plan_memory(stored, budget)
    assert asked == plain and not asked.int8_at_load
    assert minimum_budget(stored, int8_at_load=True) == minimum_budget(stored)
