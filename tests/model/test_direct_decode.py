"""The layers' decode fast paths (`_direct`: native kernels called straight, outside autograd) give the
bits of their general forward, which runs the same kernels through the per-op dispatch when autograd
is on (the weights need no gradient, so the dispatch still picks the kernels)."""

import pytest
import torch

import k3
from k3.engine import LLM, SamplingParams
from k3.layers.kda import KimiDeltaAttention
from k3.layers.mla import GatedMLA
from k3.layers.mlp import GLUMLP
from k3.model.block import DecoderLayer
from k3.model.k3 import K3ForCausalLM, K3TextModel
from k3.layers.moe import LatentMoE
from k3.ops.dispatch import reference_only

IDS = torch.tensor([[3, 17, 40, 9, 21, 2, 33], [8, 1, 30, 12, 5, 44, 7], [19, 2, 2, 6, 50, 11, 4]])
STEPS = ((5, 9, 1), (11, 3, 60), (1, 1, 2))


def _decode(model, batch: int) -> list[torch.Tensor]:
    state = model.new_state(batch)
    out = [model(IDS[:batch], state)]
    return out + [model(torch.tensor(step[:batch]).view(batch, 1), state) for step in STEPS]


# What each fast path answers through: the attentions' per-step arguments (their state added to a bound
# step; asked by their own `_direct`, by the whole-layer step and by the whole-token step alike), the
# FFNs' own fast paths, the decoder layer's whole-layer arguments (whose bound step holds the FFN's
# arguments), the model's output mix and norm in one call, and the whole token in one call.
FAST = ((KimiDeltaAttention, "step_args"), (GatedMLA, "step_args"), (LatentMoE, "direct_args"),
        (GLUMLP, "direct_args"), (DecoderLayer, "decode_args"), (K3TextModel, "_output_direct"),
        (K3ForCausalLM, "_direct"))


def _count_direct(monkeypatch) -> dict[str, int]:
    counts = {cls.__name__: 0 for cls, _ in FAST}
    for cls, name in FAST:
        original = getattr(cls, name)

        def counted(self, *args, _original=original, _name=cls.__name__):
            out = _original(self, *args)
            counts[_name] += out is not None
            return out

        monkeypatch.setattr(cls, name, counted)
    return counts


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("whole_token", [True, False], ids=["token-call", "layer-calls"])
def test_direct_decode_equals_the_dispatched_forward_bit_for_bit(tiny_checkpoint, monkeypatch, batch, whole_token):
    """A decode step runs as one native call for the whole token (model/direct_token.py), or, with that
    off, one a layer: both give the general forward's bits."""
    model = k3.load(tiny_checkpoint)
    if not whole_token:
        monkeypatch.setattr(K3ForCausalLM, "_direct", lambda self, *a: None)
    counts = _count_direct(monkeypatch)
    with torch.enable_grad():
        general = _decode(model, batch)
    assert not any(counts.values()), "under autograd the general forward runs"
    with torch.inference_mode():
        direct = _decode(model, batch)
    layers = model.model.layers
    kda = sum(isinstance(layer.self_attn, KimiDeltaAttention) for layer in layers)
    mla = sum(isinstance(layer.self_attn, GatedMLA) for layer in layers)
    moe = sum(hasattr(layer, "block_sparse_moe") for layer in layers)
    assert kda and mla and moe
    assert counts["KimiDeltaAttention"] == kda * len(STEPS), "every decode step of every KDA layer took the fast path"
    assert counts["GatedMLA"] == mla * len(STEPS)
    assert counts["LatentMoE"] >= moe, "the prompt's few rows take the MoE's own fast path"
    if whole_token:
        assert counts["K3ForCausalLM"] == len(STEPS), "every decode step is one call"
        assert counts["DecoderLayer"] == 0 and counts["K3TextModel"] == 1, "the layers' own: the prompt's rows only"
    else:
        assert counts["K3ForCausalLM"] == 0
        assert counts["DecoderLayer"] == (kda + mla) * len(STEPS), "every decoder layer's whole step"
        assert counts["K3TextModel"] == len(STEPS) + 1, "the output mix and norm: the prompt's rows and each step"
    for a, b in zip(general, direct):
        assert torch.equal(a, b)


def test_direct_decode_stays_off_under_reference_only(tiny_checkpoint, monkeypatch):
    model = k3.load(tiny_checkpoint)
    counts = _count_direct(monkeypatch)
    with torch.inference_mode(), reference_only():
        _decode(model, 1)
    assert not any(counts.values())


def test_engine_decode_takes_the_fast_path_and_matches_the_general_one(tiny_checkpoint, monkeypatch):
    """The engine's paged state slots (ragged batches) go through the same fast path."""
    counts = _count_direct(monkeypatch)
    llm = LLM(tiny_checkpoint, max_num_seqs=4)
    prompts = [IDS[0].tolist(), IDS[1, :4].tolist(), IDS[2, :6].tolist()]
    params = SamplingParams(max_tokens=6, temperature=0)
    fast = [o.token_ids for o in llm.generate(prompts, params)]
    for name in ("KimiDeltaAttention", "GatedMLA", "LatentMoE", "K3ForCausalLM"):
        assert counts[name], f"{name}'s fast path"
    monkeypatch.setattr(K3ForCausalLM, "_direct", lambda self, *a: None)
    assert [o.token_ids for o in llm.generate(prompts, params)] == fast, "one call a layer"
    assert counts["DecoderLayer"]
    for cls in (KimiDeltaAttention, GatedMLA, LatentMoE, GLUMLP, DecoderLayer):
        monkeypatch.setattr(cls, "_direct", lambda self, *a: None)
    monkeypatch.setattr(K3TextModel, "_output_direct", lambda self, *a: None)
    assert [o.token_ids for o in llm.generate(prompts, params)] == fast


def test_whole_token_step_binds_afresh_when_a_weight_is_replaced(tiny_checkpoint, monkeypatch):
    """The whole-token step holds the objects it bound: a weight replaced between steps (a new Parameter,
    or new storage under the same one) is what the next step reads, as the per-layer path reads it."""
    token, layers = k3.load(tiny_checkpoint), k3.load(tiny_checkpoint)
    counts = _count_direct(monkeypatch)
    original = K3ForCausalLM._direct
    monkeypatch.setattr(K3ForCausalLM, "_direct", lambda self, *a: original(self, *a) if self is token else None)
    states = [m.new_state(1) for m in (token, layers)]
    with torch.inference_mode():
        for m, st in zip((token, layers), states):
            m(IDS[:1], st)
            m(torch.tensor([[5]]), st)
    with torch.no_grad():
        for m in (token, layers):
            o_proj = m.model.layers[0].self_attn.o_proj
            o_proj.weight = torch.nn.Parameter(o_proj.weight * 2, requires_grad=False)
            head = m.lm_head.weight
            head.data = head.data.flip(0).contiguous()
    with torch.inference_mode():
        a, b = (m(torch.tensor([[9]]), st) for m, st in zip((token, layers), states))
    assert counts["K3ForCausalLM"] == 2
    assert torch.equal(a, b)


def test_part_timing_splits_the_layer_steps_wall_time(tiny_checkpoint):
    """benchmarks/decode_profile.py's in-step profile: each part is timed inside the layer steps."""
    from k3.ops.native import native

    kernels = native()
    if kernels is None:
        pytest.skip("the native kernels are not built here (K3_NATIVE=0 or no compiler)")
    model = k3.load(tiny_checkpoint)
    with torch.inference_mode():
        state = model.new_state(1)
        model(IDS[:1], state)  # a short prompt's rows take some of the sublayer steps too: untimed
        kernels.set_part_timing(True)
        try:
            for step in STEPS:
                model(torch.tensor(step[:1]).view(1, 1), state)
            parts = kernels.part_seconds()
        finally:
            kernels.set_part_timing(False)
    assert set(parts) == {"layer_decode", "gemv", "experts", "kda_recurrence", "mla_attention", "row_ops"}
    inner = sum(v for k, v in parts.items() if k != "layer_decode")
    assert all(v > 0 for v in parts.values())
    assert inner <= parts["layer_decode"]
    assert kernels.set_part_timing(False) is False and kernels.part_seconds()["gemv"] == 0.0, "off zeroes the totals"


def test_whole_token_step_keeps_the_rows_logits_index_asks_for(tiny_checkpoint, monkeypatch):
    """forward_batch's logits_index on a decode batch: a subset in any order, or none, as the layers give."""
    from k3.layers.batch import ForwardBatch

    model = k3.load(tiny_checkpoint)

    def decode(state) -> list[torch.Tensor]:
        out = []
        for index in (torch.tensor([2, 0]), torch.tensor([1, 1, 2]), torch.zeros(0, dtype=torch.long), None):
            batch = ForwardBatch.uniform(3, 1, state.num_tokens)
            out.append(model.forward_batch(torch.tensor([5, 9, 1]), batch, state.layers, index))
            state.num_tokens += 1
        return out

    counts, token, layers = _token_then_layers(model, monkeypatch, IDS, decode)
    assert counts["K3ForCausalLM"] == 3, "the empty index falls back to the layers"
    for a, b in zip(token, layers):
        assert a.shape == b.shape and torch.equal(a, b)
    assert token[2].shape == (0, model.config.vocab_size)


def _token_then_layers(model, monkeypatch, prompt: torch.Tensor, decode) -> tuple[dict, list, list]:
    """(fast-path counts, decode(state) with the whole-token step, decode(state) with a call a layer), each
    on a fresh state that has read `prompt` [B, T]."""
    counts = _count_direct(monkeypatch)
    results = []
    for whole_token in (True, False):
        if not whole_token:
            monkeypatch.setattr(K3ForCausalLM, "_direct", lambda self, *a: None)
        with torch.inference_mode():
            state = model.new_state(prompt.shape[0])
            model(prompt, state)
            results.append(decode(state))
    return counts, *results


def test_whole_token_step_with_a_tied_head(tmp_path, monkeypatch):
    """A tied vocabulary projection (the embedding table as the head) takes the one-call step too, with
    the layers' bits."""
    import dataclasses

    from k3.config.presets import tiny
    from k3.testing.checkpoint import make_checkpoint

    model = k3.load(make_checkpoint(tmp_path, dataclasses.replace(tiny(), tie_word_embeddings=True), seed=3))
    counts, token, layers = _token_then_layers(
        model, monkeypatch, IDS[:2, :3], lambda state: [model(torch.tensor([[t], [t + 1]]), state) for t in (5, 8, 11)])
    assert counts["K3ForCausalLM"] == 3
    assert all(torch.equal(a, b) for a, b in zip(token, layers))
