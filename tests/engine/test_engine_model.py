"""The engine on a real (tiny, random, fp32) K3 checkpoint."""

import gc
import json

import psutil
import pytest
import torch
from safetensors.torch import load_file, save_file

import k3
from k3.engine import LLM, SamplingParams

GREEDY = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)
CACHE = "16MiB"


@pytest.fixture(scope="module")
def model(tiny_checkpoint):
    return k3.load(tiny_checkpoint, dtype=torch.float32)


def _prompt(n, seed):
    return torch.randint(0, 100, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def _recompute_greedy(model, prompt, n):
    ids = list(prompt)
    with torch.inference_mode():
        for _ in range(n):
            ids.append(int(model(torch.tensor([ids]))[0, -1].argmax()))
    return ids[len(prompt):]


def test_cached_generation_equals_full_forward_recompute(model):
    # 70-token prompt: crosses the 64-token KDA chunk; 45 generated tokens.
    prompts = [_prompt(70, 1), _prompt(5, 2)]
    outs = LLM(model, cache_memory=CACHE).generate(prompts, SamplingParams(max_tokens=45, temperature=0, ignore_eos=True))
    for p, o in zip(prompts, outs):
        assert o.token_ids == _recompute_greedy(model, p, 45)


def test_alone_equals_batched_with_seven_others_admitted_later(model):
    prompts = [_prompt(n, 10 + n) for n in (9, 1, 33, 17, 70, 4, 25, 12)]
    alone = [LLM(model, cache_memory=CACHE).generate([p], GREEDY)[0].token_ids for p in prompts]
    llm = LLM(model, max_num_seqs=8, max_num_batched_tokens=40, cache_memory=CACHE)
    engine, ids = llm.engine, []
    for i, p in enumerate(prompts):          # one new request per step, joining a running batch
        ids.append(engine.add_request(p, GREEDY))
        engine.step() if i % 2 else None
    done = {}
    while engine.has_unfinished():
        done.update({o.request_id: o for o in engine.step() if o.finished})
    assert [done[i].token_ids for i in ids] == alone


@pytest.mark.parametrize("budget", [1, 7, 64, 10_000])
def test_chunked_prefill_budgets_give_the_same_tokens(model, budget):
    prompts = [_prompt(70, 3), _prompt(20, 4)]
    reference = [_recompute_greedy(model, p, 6) for p in prompts]
    outs = LLM(model, max_num_batched_tokens=budget, cache_memory=CACHE).generate(
        prompts, SamplingParams(max_tokens=6, temperature=0, ignore_eos=True))
    assert [o.token_ids for o in outs] == reference


def test_seeded_sampling_is_reproducible_and_batch_independent(model):
    sampled = SamplingParams(max_tokens=10, temperature=1.0, top_p=0.9, seed=1234, ignore_eos=True)
    alone = LLM(model, cache_memory=CACHE).generate([_prompt(6, 5)], sampled)[0].token_ids
    others = [_prompt(n, n) for n in (3, 11, 30)]
    mixed = LLM(model, max_num_seqs=4, cache_memory=CACHE, seed=99).generate(
        others + [_prompt(6, 5)], [SamplingParams(max_tokens=10, temperature=1.0, ignore_eos=True)] * 3 + [sampled])
    assert mixed[-1].token_ids == alone
    unseeded = LLM(model, cache_memory=CACHE).generate([_prompt(6, 5)] * 2, SamplingParams(
        max_tokens=10, temperature=1.0, ignore_eos=True))
    assert unseeded[0].token_ids != unseeded[1].token_ids


def test_nan_logits_fail_only_that_request(tiny_checkpoint, tmp_path):
    import shutil
    d = tmp_path / "nan"
    shutil.copytree(tiny_checkpoint, d)
    index = json.loads((d / "model.safetensors.index.json").read_text())
    name = "language_model.model.embed_tokens.weight"
    shard = d / index["weight_map"][name]
    tensors = load_file(str(shard))
    tensors[name][7] = float("nan")
    save_file(tensors, str(shard), metadata={"format": "pt"})
    prompts = [[1, 2, 3], [4, 7, 5], [8, 9]]
    outs = LLM(str(d), dtype=torch.float32, cache_memory=CACHE).generate(prompts, GREEDY)
    assert [o.finish_reason for o in outs] == ["length", "error", "length"]
    assert "non-finite" in outs[1].error
    clean = LLM(str(tiny_checkpoint), dtype=torch.float32, cache_memory=CACHE).generate([prompts[0], prompts[2]], GREEDY)
    assert [outs[0].token_ids, outs[2].token_ids] == [o.token_ids for o in clean]


def test_abort_and_a_thousand_requests_leave_no_growth(model):
    llm = LLM(model, max_num_seqs=8, max_num_batched_tokens=64, cache_memory=CACHE)
    engine = llm.engine
    rid = engine.add_request(_prompt(30, 6), SamplingParams(max_tokens=100, ignore_eos=True))
    for _ in range(4):
        engine.step()
    assert engine.abort(rid).finish_reason == "abort"
    start = engine.stats()
    assert start["slots_free"] == start["slots_total"] and start["blocks_free"] == start["blocks_total"]
    params = SamplingParams(max_tokens=2, temperature=0.0, ignore_eos=True)

    def run(n):
        llm.generate([_prompt(3, i) for i in range(n)], params)
        gc.collect()
        return psutil.Process().memory_info().rss

    warm = run(200)
    after = run(1000)
    end = engine.stats()
    assert end["slots_free"] == end["slots_total"] and end["blocks_free"] == end["blocks_total"]
    assert not engine.requests and end["running"] == end["waiting"] == 0
    assert after - warm < 16 * 2 ** 20, f"RSS grew {(after - warm) / 2 ** 20:.1f} MiB over 1000 requests"


def test_stream_yields_tokens_as_they_are_made_and_logprobs(model):
    llm = LLM(model, cache_memory=CACHE)
    events = list(llm.stream([_prompt(4, 8)], SamplingParams(max_tokens=5, temperature=0, ignore_eos=True, logprobs=3)))
    assert [len(e.new_token_ids) for e in events] == [1] * 5
    assert [e.finished for e in events] == [False] * 4 + [True]
    last = events[-1]
    assert len(last.logprobs) == 5 and all(len(lp.top) == 3 for lp in last.logprobs)
    assert all(lp.token_id == max(lp.top, key=lp.top.get) for lp in last.logprobs)   # greedy = top-1
    assert last.text is None   # no tokenizer yet


def test_closing_a_stream_aborts_its_requests(model):
    llm = LLM(model, cache_memory=CACHE)
    stream = llm.stream([_prompt(4, 9)], SamplingParams(max_tokens=50, ignore_eos=True))
    next(stream)
    stream.close()
    s = llm.engine.stats()
    assert s["slots_free"] == s["slots_total"] and not llm.engine.has_unfinished()


def test_bad_prompts_are_value_errors(model):
    llm = LLM(model, cache_memory=CACHE)
    with pytest.raises(ValueError, match="text prompts: needs a tokenizer"):
        llm.generate("hello")
    with pytest.raises(ValueError, match="sampling_params"):
        llm.generate([[1], [2]], [GREEDY])
    with pytest.raises(ValueError, match="cache_memory"):
        LLM(model, cache_memory="lots")


@pytest.mark.parametrize("budget", [4, 512])
def test_prompt_logprobs_equal_the_full_forward(model, budget):
    """Every prompt token is scored by the logits before it, across chunked prefill and batchmates."""
    llm = LLM(model, cache_memory=CACHE, max_num_batched_tokens=budget)
    prompt = _prompt(11, 3)
    outs = llm.generate([prompt, _prompt(7, 4)], [SamplingParams(max_tokens=2, temperature=0, prompt_logprobs=2),
                                                   SamplingParams(max_tokens=2, temperature=0)])
    scored = outs[0].prompt_logprobs
    assert outs[1].prompt_logprobs is None and scored[0] is None and len(scored) == len(prompt)
    with torch.no_grad():
        ref = torch.log_softmax(llm.model(torch.tensor([prompt])).float()[0], -1)
    for pos in range(1, len(prompt)):
        assert scored[pos].token_id == prompt[pos] and len(scored[pos].top) == 2
        assert scored[pos].logprob == pytest.approx(float(ref[pos - 1, prompt[pos]]), rel=1e-5, abs=1e-6)
    with pytest.raises(ValueError, match="prompt_logprobs"):
        SamplingParams(prompt_logprobs=-1)
