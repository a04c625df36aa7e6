"""Cross-implementation parity with a third engine: llama.cpp (C++, its own converter and graph).

Needs the anchor built (`make llama-cpp`, about 6 minutes once on 2 cores). Without it these tests skip and
say so; CI builds it and sets K3_REQUIRE_LLAMA_CPP=1, so there a missing build fails instead.
"""

import os

import numpy as np
import pytest
import torch

import k3
from k3.config.presets import tiny_chat
from k3.layers.experts import ExpertBank
from k3.layers.moe import LatentMoE
from k3.ops.activation import glu
from k3.ops.mxfp4 import dequantize
from k3.testing import assert_close, make_checkpoint, rel_l2
from k3.testing.llama_cpp import cache_dir, convert, is_built, logits

if not is_built():
    why = f"llama.cpp is not built in {cache_dir()}: run `make llama-cpp` to compare against it"
    if os.environ.get("K3_REQUIRE_LLAMA_CPP") == "1":
        pytest.fail(f"K3_REQUIRE_LLAMA_CPP=1 but {why}", pytrace=False)
    pytest.skip(why, allow_module_level=True)

IDS = torch.randint(0, 512, (70,), generator=torch.Generator().manual_seed(7))  # a partial second KDA chunk


def _k3_logits(path) -> np.ndarray:
    model = k3.load(path, dtype=torch.float32)
    with torch.no_grad():
        return model(IDS[None]).numpy()[0]


@pytest.fixture(scope="module")
def dense(tmp_path_factory):
    """Experts unquantised (bf16), every matmul fp32 on both sides: the two must agree to rounding."""
    d = make_checkpoint(tmp_path_factory.mktemp("dense"), tiny_chat(expert_format=None), seed=3,
                        with_vision=False, tokenizer=True)
    return d, convert(d, d / "f32.gguf", "f32")


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    """MXFP4 experts, repacked by llama.cpp's converter: a wrong nibble order or scale would be gross."""
    d = make_checkpoint(tmp_path_factory.mktemp("mxfp4"), tiny_chat(), seed=4, with_vision=False, tokenizer=True)
    return d, convert(d, d / "f32-mxfp4.gguf", "f32")


def test_fp32_logits_match_llama_cpp(dense):
    d, gguf = dense
    ours, theirs = _k3_logits(d), logits(gguf, IDS.tolist())
    assert_close("k3 vs llama.cpp (fp32)", ours, theirs, 1e-4)
    assert (ours.argmax(-1) == theirs.argmax(-1)).all()


class Q8InputExperts(ExpertBank):
    """k3's MXFP4 experts, dequantised exactly, with each matmul's input rounded as ggml's CPU backend
    rounds it before an MXFP4 product (q8_0: blocks of 32, scale amax/127 stored in fp16)."""

    def __init__(self, packed):
        super().__init__()
        self.act, self.beta, self.linear_beta = packed.act, packed.beta, packed.linear_beta
        self.w = {m: dequantize(getattr(packed, f"{m}_packed"), getattr(packed, f"{m}_scale"), packed.group_size)
                  for m in ("w1", "w3", "w2")}

    @staticmethod
    def q8_0(x: torch.Tensor) -> torch.Tensor:
        blocks = x.reshape(*x.shape[:-1], -1, 32)
        d = blocks.abs().amax(-1, keepdim=True) / 127
        q = torch.round(blocks * torch.where(d > 0, 1 / d, torch.zeros_like(d)))
        return (q * d.half().float()).reshape(x.shape)

    def forward(self, e, z):
        z8 = self.q8_0(z)
        h = glu(z8 @ self.w["w1"][e].T, z8 @ self.w["w3"][e].T, self.act, self.beta, self.linear_beta)
        return self.q8_0(h) @ self.w["w2"][e].T


def test_mxfp4_experts_match_llama_cpp(packed):
    # The converter repacks compressed-tensors MXFP4 into ggml's layout; k3 reads the original. With
    # the activation rounding llama.cpp applies reproduced on k3's side, the first positions agree to
    # about 1e-5, so the nibble order, the scales and the expert stacking all match (a misread layout
    # puts every position near relative error 1; without the q8_0 emulation each is off by about 1e-2).
    # The two sides' activations differ in the last bit, so now and then a value lands on the other
    # side of a q8_0 rounding boundary and moves a whole step, and the KDA state carries that to the
    # positions after it (measured: median 1e-4, worst 3e-2): hence the median position's error, a
    # decade below the unemulated gap, and a loose bound on the worst.
    d, gguf = packed
    model = k3.load(d, dtype=torch.float32)
    moes = [m for m in model.modules() if isinstance(m, LatentMoE)]
    assert moes, "the test config must have MoE layers"
    for moe in moes:
        moe.experts = Q8InputExperts(moe.experts)
    with torch.no_grad():
        ours = model(IDS[None]).numpy()[0]
    theirs = logits(gguf, IDS.tolist())
    errors = sorted(rel_l2(a, b) for a, b in zip(ours, theirs))
    assert errors[len(errors) // 2] <= 1e-3, f"median position's relative L2 error {errors[len(errors) // 2]:.2e}"
    assert errors[-1] <= 1e-1, f"worst position's relative L2 error {errors[-1]:.2e}"
