"""Prefix caching on a real (tiny, random) K3 checkpoint: exactness against cache off.

The guarantee: the cache changes only where prefill chunks end. A request resumed from the cache at p
computes exactly what cache off computes when resumed from saved state at p, its earlier turn chunked
at the same places (bit-identical logits, alone); against plain cache off it has the engine's
chunked-prefill exactness (same greedy tokens, logits within a relative error of 1e-5 in fp32), alone
or among batchmates that do not resume.
"""

import pytest
import torch

import k3
from k3.engine import LLM, SamplingParams
from k3.testing.tolerance import assert_close

GREEDY = SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True)
CACHE = "16MiB"
TOL = 1e-5


@pytest.fixture(scope="module", params=[torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def model(tiny_checkpoint, request):
    return k3.load(tiny_checkpoint, dtype=request.param)


def _prompt(n, seed):
    return torch.randint(0, 100, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def _capture(llm) -> dict[str, list[torch.Tensor]]:
    """request id -> the logits rows it was sampled from, step by step."""
    rows: dict[str, list[torch.Tensor]] = {}
    execute = llm.engine.runner.execute

    def spy(plan):
        out = execute(plan)
        for req, row in zip(out.requests, out.logits):
            rows.setdefault(req.request_id, []).append(row.clone())
        return out

    llm.engine.runner.execute = spy
    return rows


def _logits(llm, rows, prompts, **kw):
    outs = llm.generate(prompts, GREEDY, **kw)
    return outs, [torch.stack(rows[o.request_id]) for o in outs]


def _same_as_cache_off(model, prompts, outs, logits):
    """Each prompt run alone with the cache off: the same greedy tokens, logits within TOL (fp32)."""
    off = LLM(model, cache_memory=CACHE, enable_prefix_caching=False)
    rows = _capture(off)
    for p, o, l in zip(prompts, outs, logits):
        (alone,), (l_alone,) = _logits(off, rows, [p])
        assert o.token_ids == alone.token_ids
        if model.compute_dtype == torch.float32:
            assert_close("with the cache vs alone without it", l, l_alone, TOL)


def test_the_next_turn_equals_a_saved_state_resume_and_cache_off(model, tmp_path):
    first = _prompt(70, 1)                    # crosses the 64-token KDA chunk
    cached = LLM(model, cache_memory=CACHE)
    out = cached.generate([first], GREEDY)[0]
    second = first + out.token_ids + _prompt(23, 2)
    rows = _capture(cached)
    (o_hit,), (l_hit,) = _logits(cached, rows, [second])
    assert cached.engine.stats()["prefix_cache_hits"] == len(first) + len(out.token_ids) - 1

    plain = LLM(model, cache_memory=CACHE, enable_prefix_caching=False)
    plain.generate([first], GREEDY, save_state=tmp_path / "s.safetensors")
    rows = _capture(plain)
    (o_saved,), (l_saved,) = _logits(plain, rows, [second], resume_from=tmp_path / "s.safetensors")
    assert torch.equal(l_hit, l_saved) and o_hit.token_ids == o_saved.token_ids

    _same_as_cache_off(model, [second], [o_hit], [l_hit])


def test_a_resumed_request_among_fresh_batchmates(model):
    system = _prompt(40, 3)
    cached = LLM(model, cache_memory=CACHE, max_num_seqs=4)
    cached.generate([system + [5]], GREEDY)
    prompts = [system + [5, 6, 7], _prompt(9, 4), _prompt(33, 5), _prompt(17, 6)]
    rows = _capture(cached)
    outs, logits = _logits(cached, rows, prompts)
    assert cached.engine.stats()["prefix_cache_hits"] == len(system) + 1   # only the first resumes

    _same_as_cache_off(model, prompts, outs, logits)


def test_requests_sharing_a_system_prompt_arriving_together(model):
    system = _prompt(50, 7)
    prompts = [system + _prompt(6, 10 + i) for i in range(5)]
    cached = LLM(model, cache_memory=CACHE, max_num_seqs=5, max_num_batched_tokens=20)
    outs = cached.generate(prompts, GREEDY)
    plain = LLM(model, cache_memory=CACHE, enable_prefix_caching=False, max_num_seqs=5, max_num_batched_tokens=20)
    assert [o.token_ids for o in outs] == [o.token_ids for o in plain.generate(prompts, GREEDY)]
    # A request admitted while the first finishes its prompt finds its cached blocks but no snapshot,
    # and takes one where they end (a branch point); the ones after it resume there (32 or 48 tokens).
    assert cached.engine.stats()["prefix_cache_hits"] >= 3 * 32


def test_a_long_prompt_sent_again_resumes_at_its_last_block_boundary(model):
    prompt = _prompt(530, 9)                 # 512 tokens or more: a chunk is cut at 528 for a snapshot there
    cached = LLM(model, cache_memory=CACHE)
    rows = _capture(cached)
    outs, logits = _logits(cached, rows, [prompt, prompt])
    assert cached.engine.stats()["prefix_cache_hits"] == 528    # sent together: the second waits for 528
    (again,), (l_again,) = _logits(cached, rows, [prompt])
    assert cached.engine.stats()["prefix_cache_hits"] == 2 * 528
    assert again.token_ids == outs[0].token_ids == outs[1].token_ids
    _same_as_cache_off(model, [prompt, prompt], [again, outs[1]], [l_again, logits[1]])


def test_prompt_logprobs_are_computed_not_reused(model):
    prompt = _prompt(30, 8)
    llm = LLM(model, cache_memory=CACHE)
    llm.generate([prompt], GREEDY)
    scored = SamplingParams(max_tokens=2, temperature=0.0, prompt_logprobs=0, ignore_eos=True)
    out = llm.generate([prompt + [1, 2]], scored)[0]
    assert all(lp is not None for lp in out.prompt_logprobs[1:])
    assert llm.engine.stats()["prefix_cache_hits"] == 0
