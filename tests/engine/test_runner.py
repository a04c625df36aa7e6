"""The runner's step: decode reads the paged cache in place for ragged batches, one StepIndex per step,
block tables written once per request, native kernels equal to the references end to end, and the
statistics snapshot other threads read."""

from __future__ import annotations

import threading
from types import MappingProxyType

import pytest
import torch

import k3
import k3.layers.mla as mla_layer
from k3.engine import LLM, SamplingParams
from k3.engine.memory.blocks import PagedMLAView
from k3.engine.memory.manager import CachePools
from k3.ops.dispatch import reference_only

from test_engine_model import CACHE, _prompt, model  # noqa: F401  (the tiny model fixture and prompts)


def test_a_ragged_decode_batch_is_one_in_place_call_per_layer(model, monkeypatch):
    seen_lens, extends = [], []
    real_decode, real_extend = mla_layer.paged_decode, PagedMLAView.extend

    def spy_decode(q, paged, scale):
        seen_lens.append(paged.lens.tolist())
        return real_decode(q, paged, scale)

    def spy_extend(self, seqs, c_kv, k_x):
        extends.append(c_kv.shape[1])
        return real_extend(self, seqs, c_kv, k_x)

    monkeypatch.setattr(mla_layer, "paged_decode", spy_decode)
    monkeypatch.setattr(PagedMLAView, "extend", spy_extend)
    prompts = [_prompt(n, n) for n in (3, 17, 40)]
    params = SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True)
    solo = []
    for p in prompts:
        solo.append(LLM(model, cache_memory=CACHE).generate([p], params)[0].token_ids)
    seen_lens.clear(), extends.clear()
    together = LLM(model, max_num_seqs=3, cache_memory=CACHE).generate(prompts, params)
    assert [o.token_ids for o in together] == solo
    n_mla = len(model.config.mla_layers)
    ragged = [lens for lens in seen_lens if len(set(lens)) == 3]
    assert len(ragged) == 5 * n_mla, "each decode step: one call per MLA layer for all three lengths"
    assert all(t > 1 for t in extends), "decode steps never gather the history through extend()"


def test_one_step_index_per_step_and_block_tables_written_at_admission(model, monkeypatch):
    calls = []
    real = CachePools.layer_views
    monkeypatch.setattr(CachePools, "layer_views", lambda self, *a: calls.append(1) or real(self, *a))
    llm = LLM(model, max_num_seqs=2, cache_memory=CACHE)
    engine = llm.engine
    rid = engine.add_request(_prompt(21, 5), SamplingParams(max_tokens=30, temperature=0.0, ignore_eos=True))
    engine.step()
    placement = engine.allocator.placement(rid)
    row = engine.runner.pools.block_tables[placement.slot, :len(placement.blocks)].tolist()
    assert row == list(placement.blocks)
    steps = 1
    while engine.has_unfinished():
        engine.step()
        steps += 1
    assert len(calls) == steps


def test_native_kernels_and_references_give_the_same_generation(model):
    prompts = [_prompt(n, 30 + n) for n in (5, 33, 70)]
    params = SamplingParams(max_tokens=10, temperature=0.0, ignore_eos=True, logprobs=3)
    fast = LLM(model, max_num_seqs=3, cache_memory=CACHE).generate(prompts, params)
    with reference_only():
        slow = LLM(model, max_num_seqs=3, cache_memory=CACHE).generate(prompts, params)
    for f, s in zip(fast, slow):
        assert f.token_ids == s.token_ids
        for a, b in zip(f.logprobs, s.logprobs):
            assert a.logprob == pytest.approx(b.logprob, rel=1e-4, abs=1e-5)


def test_seeded_sampling_does_not_depend_on_batchmates_or_arrival(model):
    params = SamplingParams(max_tokens=12, temperature=1.0, top_p=0.9, seed=77)
    target = _prompt(9, 1)
    alone = LLM(model, cache_memory=CACHE).generate([target], params)[0].token_ids
    others = [(_prompt(n, n), SamplingParams(max_tokens=8, temperature=0.7, seed=n)) for n in (4, 15, 30)]
    llm = LLM(model, max_num_seqs=4, cache_memory=CACHE)
    outs = llm.generate([p for p, _ in others] + [target], [s for _, s in others] + [params])
    assert outs[-1].token_ids == alone


def test_statistics_snapshot_is_read_only_and_safe_to_read_while_stepping(model):
    llm = LLM(model, max_num_seqs=4, cache_memory=CACHE)
    engine = llm.engine
    snap = engine.stats_snapshot()
    assert isinstance(snap, MappingProxyType)
    with pytest.raises(TypeError):
        snap["running"] = 5
    for i in range(6):
        engine.add_request(_prompt(10 + i, i), SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True))
    assert engine.stats_snapshot()["waiting"] == 6
    errors, stop = [], threading.Event()

    def reader():
        while not stop.is_set():
            try:
                s = engine.stats_snapshot()
                assert s["running"] + s["waiting"] <= 6 and s["slots_free"] <= s["slots_total"]
            except Exception as e:  # noqa: BLE001
                errors.append(e)
            reads.append(1)
            stop.wait(0.0002)    # yield the GIL: a spinning reader would starve the stepping thread

    reads: list = []
    t = threading.Thread(target=reader)
    t.start()
    while engine.has_unfinished():
        engine.step()
    stop.set()
    t.join()
    assert not errors and len(reads) > 10           # read many times while it stepped
    final = engine.stats_snapshot()
    assert final["finished"] == 6 and final["running"] == 0 and final["generated_tokens"] == 48


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here (run when a device machine is lent)")
def test_the_engine_runs_on_cuda_and_matches_the_cpu(tiny_checkpoint):
    prompts = [_prompt(n, n) for n in (4, 19, 70)]
    params = SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True)
    cpu = LLM(k3.load(tiny_checkpoint, dtype=torch.float32), cache_memory=CACHE).generate(prompts, params)
    gpu_model = k3.load(tiny_checkpoint, dtype=torch.float32, device="cuda")
    gpu = LLM(gpu_model, cache_memory=CACHE).generate(prompts, params)
    assert [o.token_ids for o in gpu] == [o.token_ids for o in cpu]
    seeded = SamplingParams(max_tokens=8, temperature=1.0, top_p=0.9, seed=3)
    assert (LLM(gpu_model, cache_memory=CACHE).generate(prompts, seeded)[0].token_ids
            == LLM(k3.load(tiny_checkpoint, dtype=torch.float32), cache_memory=CACHE).generate(prompts, seeded)[0].token_ids)
