"""Trunk streaming: when the trunk does not fit, streamed layers' large matrices are read from the shards
before each layer runs (the next one's read in flight), and the model computes exactly what the resident
one does; the planner keeps trunk layers before experts and states its minimum."""

from __future__ import annotations

import pytest
import torch

import k3
from k3.checkpoint import CheckpointError
from k3.config.presets import released, tiny
from k3.engine import LLM, SamplingParams
from k3.streaming import minimum_budget, plan_memory
from k3.streaming.trunk import ARENAS, layer_stream_specs
from k3.testing import make_checkpoint
from test_budget_rss import OVERHEAD, RSS_PRELUDE

CONFIG = tiny(num_experts=13, num_experts_per_token=3, hidden_size=328)  # matrices of many pages


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return make_checkpoint(tmp_path_factory.mktemp("trunk"), CONFIG, seed=11)


def ids(n: int, batch: int = 2, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, CONFIG.vocab_size, (batch, n), generator=torch.Generator().manual_seed(seed))


def budget_keeping(layers: int, state_bytes: int = 0) -> int:
    """A budget with the `layers` largest layers' matrices resident and the rest streamed."""
    sizes = sorted((sum(s.nbytes for s in specs) for specs in layer_stream_specs(CONFIG).values() if specs), reverse=True)
    return minimum_budget(CONFIG, state_bytes=state_bytes) + sum(sizes[:layers])


def _same_as_resident(model, resident) -> None:
    x = ids(19)
    assert torch.equal(resident(x), model(x))
    state_r, state_s = resident.new_state(2), model.new_state(2)
    for chunk in (x[:, :7], x[:, 7:8], x[:, 8:9], x[:, 9:10]):
        assert torch.equal(resident(chunk, state_r), model(chunk, state_s))


@pytest.mark.parametrize("kept,direct_io", [(0, True), (0, False), (1, True)])
def test_streamed_trunk_logits_are_bit_identical_to_resident(ckpt, kept, direct_io):
    resident = k3.load(ckpt)
    model = k3.load(ckpt, memory_budget=budget_keeping(kept), direct_io=direct_io)
    plan = model.memory_plan
    assert plan.mode == "stream-trunk" and len(plan.streamed_layers) == CONFIG.num_hidden_layers - kept
    assert plan.resident_bytes <= plan.budget
    _same_as_resident(model, resident)
    stats = model.trunk_store.stats
    assert stats.direct_io is direct_io
    # 5 forwards, each layer read once in each, plus the first forward's two reads before any prefetch
    # (odd and even numbers of streamed layers alike: the prefetch wraps to the arena's own next user).
    assert stats.layer_reads == 5 * len(plan.streamed_layers) + 2
    assert stats.bytes_read >= 5 * plan.streamed_trunk_bytes


def test_reads_out_of_turn_or_after_a_failed_step_still_give_the_right_bytes(ckpt):
    resident = k3.load(ckpt)
    model = k3.load(ckpt, memory_budget=budget_keeping(0))
    store = model.trunk_store
    first, last = store.order[0], store.order[-1]
    store.done(last)     # a prefetch for a layer that will not come next
    store.done(first)
    store.done(first)    # twice into one arena: the first read finishes before the second starts
    store.ready(last)    # a layer asked for out of turn
    _same_as_resident(model, resident)


def test_generation_through_the_engine_is_identical(ckpt):
    params = SamplingParams(max_tokens=10, temperature=0.0, logprobs=3, ignore_eos=True)
    prompts = [[1, 2, 3, 4, 5], [9, 8, 7], [11] * 17]
    resident = LLM(str(ckpt), max_num_seqs=3, cache_memory="4MiB").generate(prompts, params)
    llm = LLM(str(ckpt), max_num_seqs=3, cache_memory="4MiB", memory_budget=budget_keeping(1, 4 * 2 ** 20))
    assert llm.model.memory_plan.mode == "stream-trunk"
    for a, b in zip(resident, llm.generate(prompts, params)):
        assert a.token_ids == b.token_ids
        assert [lp.logprob for lp in a.logprobs] == [lp.logprob for lp in b.logprobs]


def test_a_cut_shard_is_reported_when_streamed(ckpt, tmp_path):
    import shutil

    d = tmp_path / "cut"
    shutil.copytree(ckpt, d)
    model = k3.load(d, memory_budget=budget_keeping(0))
    parts = [p for p, _ in model.trunk_store.layouts[model.trunk_store.order[-1]][0]]
    file = parts[-1].file
    with open(d / file, "r+b") as f:   # the shard now ends inside the last streamed layer's last matrix
        f.truncate(max(p.offset for p in parts if p.file == file) + 1)
    with pytest.raises(CheckpointError, match="re-download"):
        model(ids(4))


def test_the_planner_keeps_trunk_before_experts_and_states_its_minimum():
    least = minimum_budget(CONFIG)
    at_least = plan_memory(CONFIG, least)
    assert at_least.mode == "stream-trunk" and len(at_least.streamed_layers) == CONFIG.num_hidden_layers
    assert at_least.expert_slots == 2 and at_least.resident_bytes <= least
    with pytest.raises(ValueError, match="give at least"):
        plan_memory(CONFIG, least - 1)
    with pytest.raises(ValueError, match="stored dtype"):
        plan_memory(CONFIG, least, storage_itemsize=4)
    one_more = plan_memory(CONFIG, budget_keeping(1))
    assert len(one_more.streamed_layers) == CONFIG.num_hidden_layers - 1 and one_more.expert_slots == 2


def test_the_released_model_plans_at_32_48_and_64_gb():
    c = released().replace(vision=None)         # the text model: the tower's share is tests/vision's
    state = 2 ** 30
    assert minimum_budget(c, state_bytes=state) < 12 * 10 ** 9
    plans = [plan_memory(c, gb * 10 ** 9, state_bytes=state) for gb in (32, 48, 64)]
    seconds = [p.seconds_per_token(7e9, 40e9) for p in plans]
    for p in plans:
        assert p.mode == "stream-trunk" and p.resident_bytes <= p.budget and len(p.streamed_layers) > ARENAS
        assert p.trunk_streamed_bytes_per_token == p.streamed_trunk_bytes > 0
    assert seconds[0] > seconds[1] > seconds[2] > 0
    assert plans[0].streamed_trunk_bytes - plans[2].streamed_trunk_bytes > 30 * 10 ** 9   # RAM buys trunk first


def test_released_model_plans_with_an_int8_trunk():
    """At load, int8 halves what a resident layer costs (streamed ones are read as stored); a derived int8
    checkpoint halves what a streamed one reads too. 64 GB then holds the whole int8 trunk."""
    c, state = released().replace(vision=None), 2 ** 30
    for gb in (32, 64):
        bf16 = plan_memory(c, gb * 10 ** 9, state_bytes=state)
        at_load = plan_memory(c, gb * 10 ** 9, state_bytes=state, int8_at_load=True)
        derived = plan_memory(c.replace(trunk_format="int8"), gb * 10 ** 9, state_bytes=state)
        for p in (at_load, derived):
            assert p.resident_bytes <= p.budget
            assert p.seconds_per_token(7e9, 40e9) < bf16.seconds_per_token(7e9, 40e9)
        assert derived.streamed_bytes_per_token <= at_load.streamed_bytes_per_token < bf16.streamed_bytes_per_token
        if gb == 64:
            assert at_load.mode == derived.mode == "stream-experts" and bf16.mode == "stream-trunk"
        else:
            assert at_load.int8_at_load and len(at_load.streamed_layers) < len(bf16.streamed_layers)
            assert derived.streamed_bytes_per_token < at_load.streamed_bytes_per_token
    assert minimum_budget(c, state_bytes=state, int8_at_load=True) == minimum_budget(c, state_bytes=state)
    assert minimum_budget(c.replace(trunk_format="int8"), state_bytes=state) < minimum_budget(c, state_bytes=state)


def test_k3_generate_runs_the_plan(ckpt, capsys):
    from k3.cli.main import main

    def tokens(*budget):
        assert main(["generate", "--model", str(ckpt), "--prompt-ids", "1,2,3", "--max-tokens", "5", "--ignore-eos",
                     "--cache-memory", "4MiB", *budget]) == 0
        return capsys.readouterr().out.split("\n")[0]

    assert tokens("--memory-budget", str(budget_keeping(0, 4 * 2 ** 20))) == tokens()


# A dense 9-layer model whose layers dominate its bytes: 236 MB of trunk, a quarter of it the minimum plan.
WIDE = tiny(num_hidden_layers=9, layer_types=("kda",) * 4 + ("mla",) + ("kda",) * 3 + ("mla",), mlp_types=("dense",) * 9,
            intermediate_size=4104, hidden_size=1032, attn_res_block_size=3)
RSS_CHILD = RSS_PRELUDE + r"""
budget = int(sys.argv[2]) if sys.argv[2] != "none" else None
llm = LLM(sys.argv[1], max_num_seqs=1, cache_memory=int(sys.argv[3]), memory_budget=budget)
out = llm.generate([[5, 6, 7, 8, 9, 10, 11, 12]], SamplingParams(max_tokens=6, ignore_eos=True))[0]
print(json.dumps({"grown": rss('VmHWM') - base, "tokens": out.token_ids, "stats": llm.engine.stats()}))
"""


def _peak(d, budget, cache) -> dict:
    import json
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", RSS_CHILD, str(d), str(budget), str(cache)], capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_trunk_four_times_the_budget_runs_within_it(tmp_path):

    cache = 2 * 2 ** 20
    d = make_checkpoint(tmp_path / "wide", WIDE, seed=3, num_shards=3)
    budget = minimum_budget(WIDE, state_bytes=cache) + 2 ** 20
    plan = plan_memory(WIDE, budget, state_bytes=cache)
    assert plan.mode == "stream-trunk" and plan.trunk_bytes >= 3.5 * budget
    streamed, resident = _peak(d, budget, cache), _peak(d, "none", cache)
    assert streamed["stats"]["trunk_bytes_read"] > 0 and streamed["tokens"] == resident["tokens"]
    # Twice the expert test's stated overhead: measured 78 MB here, once 106 MB in a full CI run (more
    # reader threads; file pages mapped around the resident tensors); the resident run still fails it.
    assert streamed["grown"] <= budget + 2 * OVERHEAD, \
        f"peak RSS grew {streamed['grown'] / 1e6:.1f} MB for a {budget / 1e6:.0f} MB budget"
    assert resident["grown"] >= max(plan.trunk_bytes, budget + 2 * OVERHEAD), "the measure can tell them apart"
