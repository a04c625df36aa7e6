"""Expert streaming: bit-identical to the resident model, one read per distinct expert per step,
an LRU cache across steps, clear errors; the planner against spec §7."""

from __future__ import annotations

import pytest
import torch

import k3
from k3.checkpoint import CheckpointError, CheckpointReader
from k3.config.presets import released, tiny
from k3.engine import LLM, SamplingParams
from k3.streaming import plan_memory
from k3.testing import make_checkpoint
from k3.testing.tolerance import assert_close

STREAM_CONFIG = tiny(num_experts=13, num_experts_per_token=3)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return make_checkpoint(tmp_path_factory.mktemp("stream"), STREAM_CONFIG, seed=7)


def budget_for(slots: int, config=STREAM_CONFIG, state_bytes: int = 0) -> int:
    p = plan_memory(config, 10 ** 12)
    return p.trunk_bytes + state_bytes + slots * p.expert_bytes


def ids(n: int, batch: int = 2, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, STREAM_CONFIG.vocab_size, (batch, n), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("dtype", [None, torch.float32])
@pytest.mark.parametrize("slots", [2, 5])
def test_streamed_logits_are_bit_identical_to_resident(ckpt, dtype, slots):
    resident = k3.load(ckpt, dtype=dtype)
    itemsize = None if dtype is None else 4
    p = plan_memory(STREAM_CONFIG, 10 ** 12, storage_itemsize=itemsize)
    streamed = k3.load(ckpt, dtype=dtype, memory_budget=p.trunk_bytes + p.embedding_bytes * (dtype is not None)
                       + slots * p.expert_bytes)
    assert streamed.memory_plan.mode == "stream-experts" and streamed.memory_plan.expert_slots == slots
    x = ids(23)
    assert torch.equal(resident(x), streamed(x))
    state_r, state_s = resident.new_state(2), streamed.new_state(2)
    for chunk in (x[:, :9], x[:, 9:10], x[:, 10:11]):
        assert torch.equal(resident(chunk, state_r), streamed(chunk, state_s))


def test_generation_through_the_engine_is_identical(ckpt):
    params = SamplingParams(max_tokens=12, temperature=0.0, logprobs=4, ignore_eos=True)
    prompts = [[1, 2, 3, 4, 5], [9, 8, 7], [11] * 20]
    resident = LLM(str(ckpt), max_num_seqs=3, cache_memory="4MiB").generate(prompts, params)
    llm = LLM(str(ckpt), max_num_seqs=3, cache_memory="4MiB", memory_budget=budget_for(3, state_bytes=4 * 2 ** 20))
    streamed = llm.generate(prompts, params)
    for a, b in zip(resident, streamed):
        assert a.token_ids == b.token_ids
        assert [lp.logprob for lp in a.logprobs] == [lp.logprob for lp in b.logprobs]
    stats = llm.engine.stats()
    assert stats["expert_reads"] > 0 and stats["expert_bytes_per_token"] > 0
    assert 0 <= stats["expert_hit_rate"] <= 1 and stats["compute_seconds"] > 0


def test_prefix_caching_while_streaming_gives_the_resident_answers(ckpt):
    params = SamplingParams(max_tokens=6, temperature=0.0, logprobs=0, ignore_eos=True)
    first = [3, 1, 4, 1, 5, 9, 2, 6] * 3
    resident = LLM(str(ckpt), cache_memory="4MiB", enable_prefix_caching=False)
    llm = LLM(str(ckpt), cache_memory="4MiB", memory_budget=budget_for(3, state_bytes=4 * 2 ** 20))
    out = llm.generate([first], params)[0]
    second = first + out.token_ids + [7, 7, 8]
    a, b = resident.generate([second], params)[0], llm.generate([second], params)[0]
    assert llm.engine.stats()["prefix_cache_hits"] == len(first) + len(out.token_ids) - 1
    assert a.token_ids == b.token_ids
    assert_close("streamed + cached vs resident logprobs", torch.tensor([lp.logprob for lp in b.logprobs]),
                 torch.tensor([lp.logprob for lp in a.logprobs]), 1e-5)


def distinct_routed(model, x) -> set[tuple[int, int]]:
    """Run `model(x)` recording which (layer, expert) pairs the router picked."""
    seen: set[tuple[int, int]] = set()
    hooks = []
    for i in STREAM_CONFIG.moe_layers:
        moe = model.get_submodule(f"model.layers.{i}.block_sparse_moe")
        route = moe.route

        def recording(h, i=i, route=route):
            w, e = route(h)
            seen.update((i, int(v)) for v in e.unique())
            return w, e

        moe.route = recording
        hooks.append((moe, route))
    model(x)
    for moe, route in hooks:
        moe.route = route
    return seen


def test_one_read_per_distinct_expert_in_a_step(ckpt):
    model = k3.load(ckpt, memory_budget=budget_for(2))
    x = ids(32, batch=1)
    routed = distinct_routed(model, x)
    stats = model.expert_store.stats
    # 32 tokens x top-3 = 96 expert uses per layer, but each distinct expert is read once.
    assert stats.misses == len(routed) and stats.hits == 0
    assert len(routed) < 32 * 3 * len(STREAM_CONFIG.moe_layers)


def test_lru_cache_serves_repeats(ckpt):
    everything = STREAM_CONFIG.num_experts * len(STREAM_CONFIG.moe_layers)
    model = k3.load(ckpt, memory_budget=budget_for(everything - 1))  # one short of resident
    x = ids(40, batch=1)
    model(x)
    first = model.expert_store.stats.misses
    model(x)
    assert model.expert_store.stats.misses - first <= 1  # at most the one expert without a slot
    assert model.expert_store.stats.hits >= first - 1


def test_corrupt_scale_is_reported_when_streamed(ckpt, tmp_path):
    import shutil

    d = tmp_path / "c"
    shutil.copytree(ckpt, d)
    name = "model.layers.1.block_sparse_moe.experts.0.w1.weight_scale"
    file, offset, nbytes = CheckpointReader(d).data_range(name)
    with open(d / file, "r+b") as f:
        f.seek(offset)
        f.write(b"\xff" * nbytes)
    model = k3.load(d, memory_budget=budget_for(2))
    with pytest.raises(CheckpointError, match="255"):
        for seed in range(20):  # until expert 0 of layer 1 is routed
            model(ids(16, seed=seed))


def test_budget_errors_are_clear(ckpt, tmp_path):
    with pytest.raises(ValueError, match="too small.*give at least"):
        k3.load(ckpt, memory_budget=1000)
    dense = make_checkpoint(tmp_path / "dense", STREAM_CONFIG.replace(expert_format=None))
    with pytest.raises(ValueError, match="k3 quantize"):
        k3.load(dense, memory_budget=budget_for(2, STREAM_CONFIG.replace(expert_format=None)))


def test_planner_matches_spec_section_7():
    p = plan_memory(released(), 200 * 10 ** 9)
    assert p.expert_bytes == 17_547_264
    assert p.expert_bytes_per_token == 25_829_572_608
    assert p.expert_bytes * p.num_experts_total == 1_446_456_066_048
    # Non-expert text bytes: 56,743,648,000 params in BF16, of which 11,122,432 are F32 (4 bytes).
    assert p.trunk_bytes + p.embedding_bytes == 2 * 56_743_648_000 + 2 * 11_122_432
    assert p.embedding_bytes == 163_840 * 7168 * 2 and not p.embedding_resident
    assert p.mode == "stream-experts" and p.resident_bytes <= 200 * 10 ** 9
    resident = plan_memory(released(), 2 * 10 ** 12)
    assert resident.mode == "resident" and resident.expected_hit_rate == 1.0
