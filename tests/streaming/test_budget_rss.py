"""A model whose weights are 5x the memory budget runs within budget + a fixed overhead (peak RSS
measured in a subprocess), and its greedy tokens and logits equal the fully resident run's."""

from __future__ import annotations

import json
import subprocess
import sys

import torch

from k3.config.presets import tiny
from k3.streaming import plan_memory
from k3.testing import make_checkpoint

# Experts dominate: 3 x 512 x 256 MXFP4 weights (208,896 B) x 360 experts x 4 MoE layers = 301 MB.
BIG = tiny(num_experts=360, num_experts_per_token=4, moe_intermediate_size=512, routed_expert_hidden_size=256)
BUDGET = 60 * 10 ** 6
CACHE = 2 * 2 ** 20
# Stated fixed overhead beyond the budget: activations, the allocator's arenas, reader threads' stacks.
OVERHEAD = 48 * 2 ** 20

# A child process's start: rss(field) from /proc, torch's lazy runtime warmed, `base` the RSS before loading.
RSS_PRELUDE = r"""
import json, sys, torch
def rss(field):
    for line in open('/proc/self/status'):
        if line.startswith(field):
            return int(line.split()[1]) * 1024
import k3
from k3.engine import LLM, SamplingParams
torch.zeros(1) @ torch.zeros(1)  # warm up torch's lazy runtime before the baseline
base = rss('VmRSS')
"""
CHILD = RSS_PRELUDE + r"""
llm = LLM(sys.argv[1], max_num_seqs=1, cache_memory=int(sys.argv[3]), memory_budget=int(sys.argv[2]))
out = llm.generate([[5, 6, 7, 8, 9, 10, 11, 12]], SamplingParams(max_tokens=6, ignore_eos=True, logprobs=3))[0]
x = torch.arange(40).reshape(2, 20) % 101
logits = llm.model(x)
torch.save(logits, sys.argv[4])
print(json.dumps({"base": base, "peak": rss('VmHWM'), "tokens": out.token_ids,
                  "logprobs": [lp.logprob for lp in out.logprobs], "plan": llm.model.memory_plan.mode,
                  "stats": llm.engine.stats()}))
"""


def test_weights_four_times_the_budget_run_within_it(tmp_path):
    d = make_checkpoint(tmp_path / "big", BIG, seed=2, num_shards=4)
    weights = sum(p.stat().st_size for p in d.glob("*.safetensors"))
    assert weights >= 4 * BUDGET
    plan = plan_memory(BIG, BUDGET, state_bytes=CACHE)
    assert plan.mode == "stream-experts" and plan.resident_bytes <= BUDGET
    done = subprocess.run([sys.executable, "-c", CHILD, str(d), str(BUDGET), str(CACHE), str(tmp_path / "l.pt")],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    child = json.loads(done.stdout.strip().splitlines()[-1])
    assert child["plan"] == "stream-experts" and child["stats"]["expert_reads"] > 0
    grown = child["peak"] - child["base"]
    assert grown <= BUDGET + OVERHEAD, f"peak RSS grew {grown / 1e6:.1f} MB for a {BUDGET / 1e6:.0f} MB budget"

    from k3.engine import LLM, SamplingParams

    resident = LLM(str(d), max_num_seqs=1, cache_memory=CACHE)
    out = resident.generate([[5, 6, 7, 8, 9, 10, 11, 12]], SamplingParams(max_tokens=6, ignore_eos=True, logprobs=3))[0]
    assert out.token_ids == child["tokens"]
    assert [lp.logprob for lp in out.logprobs] == child["logprobs"]
    x = torch.arange(40).reshape(2, 20) % 101
    assert torch.equal(resident.model(x), torch.load(tmp_path / "l.pt"))


# A trunk-heavy model: 224 MB of bf16 trunk, 119 MB as int8, 3 MB of experts.
TRUNK_HEAVY = tiny(hidden_size=1536, intermediate_size=12288, kda_num_heads=16, kda_head_dim=96, num_attention_heads=8,
                   q_lora_rank=512, kv_lora_rank=128, qk_nope_head_dim=64, v_head_dim=64, num_experts=7,
                   moe_intermediate_size=256, routed_expert_hidden_size=256, num_shared_experts=2)
INT8_CHILD = RSS_PRELUDE + r"""
model = k3.load(sys.argv[1], trunk="int8", memory_budget=int(sys.argv[2]))
loaded = rss('VmHWM')
model(torch.arange(8).reshape(1, 8))
print(json.dumps({"base": base, "loaded": loaded, "peak": rss('VmHWM'), "plan": model.memory_plan.mode}))
"""


def test_int8_at_load_never_holds_the_bf16_trunk(tmp_path):
    """Quantising as it loads, a budget that holds the int8 trunk but not half the bf16 one is kept:
    each shard's bf16 pages are dropped once its matrices are int8 (so at most one shard's stay)."""
    from k3.streaming.plan import weight_bytes

    d = make_checkpoint(tmp_path / "heavy", TRUNK_HEAVY, seed=3, num_shards=12)
    bf16_trunk = weight_bytes(TRUNK_HEAVY, None)[0]
    int8_trunk, _, experts = weight_bytes(TRUNK_HEAVY.replace(trunk_format="int8"), None)
    budget = int8_trunk + experts + 2 ** 20
    assert plan_memory(TRUNK_HEAVY, budget, int8_at_load=True).mode == "resident"
    shard = max(p.stat().st_size for p in d.glob("*.safetensors"))
    assert budget + OVERHEAD + shard < bf16_trunk     # what this test can tell apart
    done = subprocess.run([sys.executable, "-c", INT8_CHILD, str(d), str(budget)], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    child = json.loads(done.stdout.strip().splitlines()[-1])
    grown = child["peak"] - child["base"]
    assert child["plan"] == "resident" and grown <= budget + OVERHEAD + shard, (
        f"peak RSS grew {grown / 1e6:.1f} MB, {(child['loaded'] - child['base']) / 1e6:.1f} MB by the end of loading")
