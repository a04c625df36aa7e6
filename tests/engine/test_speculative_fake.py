"""Speculative decoding's bookkeeping on the weightless model: windows, rollback, stops, back-off, batching.

The fake model's logits turn NaN when its KDA sum disagrees with its MLA history, so a rejected draft
whose KDA state was not undone fails the request: every test here also checks the rollback.
"""

import random

import pytest

from k3.engine import SamplingParams
from k3.engine.speculative import Drafter, SpeculativeConfig
from k3.engine.speculative.drafter import MAX_PAUSE
from k3.engine.speculative.ngram import propose_ngram
from fake_model import drain as _drain, expected_next, fake_engine, reference

GREEDY = dict(temperature=0.0, ignore_eos=True)


class OracleProposer:
    """Drafts the true greedy continuation, with a wrong token at a random place in some windows."""

    def __init__(self, seed=0, wrong=0.5, only=None):
        self.rng, self.wrong, self.calls, self.only = random.Random(seed), wrong, 0, only

    def propose(self, items):
        self.calls += 1
        out = []
        for ids, k in items:
            if self.only is not None and not self.only(ids):
                out.append([])
                continue
            seq = list(ids)
            for _ in range(k):
                seq.append(expected_next(seq))
            draft = seq[len(ids):]
            if self.rng.random() < self.wrong:
                j = self.rng.randrange(k)
                draft[j] = (draft[j] + 1) % 48
            out.append(draft)
        return out


class ReplayProposer:
    """Drafts what a plain run generated (the right answer), with some windows corrupted at one place."""

    def __init__(self, sequence, seed=0, wrong=0.4):
        self.sequence, self.rng, self.wrong = list(sequence), random.Random(seed), wrong

    def propose(self, items):
        out = []
        for ids, k in items:
            draft = self.sequence[len(ids):len(ids) + k]
            if draft and self.rng.random() < self.wrong:
                j = self.rng.randrange(len(draft))
                draft[j] = (draft[j] + 1) % 48
            out.append(draft)
        return out


def _engine_with(proposer, k=4, **kw):
    engine = fake_engine(speculative_config={"method": "ngram", "num_speculative_tokens": k}, **kw)
    engine.drafter = Drafter(SpeculativeConfig.parse({"method": "ngram", "num_speculative_tokens": k}), proposer)
    return engine



@pytest.mark.parametrize("block_size", [1, 4, 16])
@pytest.mark.parametrize("k", [1, 3, 7])
def test_greedy_output_equals_plain_decoding_whatever_is_accepted(block_size, k):
    engine = _engine_with(OracleProposer(seed=k), k=k, block_size=block_size, max_num_seqs=3)
    prompts = [[1, 2, 3], list(range(20)), [7], list(range(5, 16))]
    ids = [engine.add_request(p, SamplingParams(max_tokens=23, **GREEDY)) for p in prompts]
    outs = _drain(engine)
    for rid, p in zip(ids, prompts):
        assert outs[rid].finish_reason == "length", outs[rid].error
        assert outs[rid].token_ids == reference(p, 23)
    st = engine.stats()
    assert st["spec_accepted_tokens"] > 0 and st["spec_accepted_tokens"] < st["spec_drafted_tokens"]
    assert st["generated_tokens"] == 4 * 23
    assert st["steps"] < 4 * 23, "accepted drafts must save steps"
    assert st["slots_free"] == 3 and st["blocks_free"] == engine.capacity.num_blocks


def test_windows_share_steps_with_prefill_and_plain_decode():
    """A tight budget: windows are cut to what is left, and share steps with prompt chunks and with
    plain decodes (requests with odd first tokens get no drafts)."""
    engine = _engine_with(OracleProposer(seed=3, wrong=0.3, only=lambda ids: ids[0] % 2 == 0), k=5,
                          max_num_seqs=4, max_num_batched_tokens=9)
    prompts = [list(range(30)), [4, 5], list(range(11, 27)), [9] * 12]
    ids = [engine.add_request(p, SamplingParams(max_tokens=17, **GREEDY)) for p in prompts]
    with_plain = with_prompt = False
    windows = engine.runner.execute

    def spy(plan):
        nonlocal with_plain, with_prompt
        if any(c.window for c in plan.chunks):
            with_plain |= any(not c.window and c.num_tokens == 1 for c in plan.chunks)
            with_prompt |= any(c.request.num_computed < len(c.request.prompt_ids) for c in plan.chunks)
        return windows(plan)

    engine.runner.execute = spy
    got = _drain(engine)
    for rid, p in zip(ids, prompts):
        assert got[rid].token_ids == reference(p, 17)
    for seq_lens, _ in engine.model.calls:
        assert sum(seq_lens) <= 9
    assert with_plain and with_prompt


def test_max_tokens_is_never_exceeded_and_drafts_fit_the_allocation():
    engine = _engine_with(OracleProposer(wrong=0.0), k=7)
    for n in (1, 2, 3, 8, 9):
        engine.add_request([3, 1, 4], SamplingParams(max_tokens=n, **GREEDY), request_id=str(n))
    outs = _drain(engine)
    for n in (1, 2, 3, 8, 9):
        assert outs[str(n)].token_ids == reference([3, 1, 4], n)


def test_a_stop_token_among_accepted_drafts_ends_the_request_there():
    prompt = [1, 2, 5]
    ref = reference(prompt, 12)
    eos = ref[5]
    engine = fake_engine(eos_token_id=eos, speculative_config={"method": "ngram", "num_speculative_tokens": 8})
    engine.drafter = Drafter(engine.drafter.config, OracleProposer(wrong=0.0))
    rid = engine.add_request(prompt, SamplingParams(max_tokens=12, temperature=0))
    out = _drain(engine)[rid]
    assert out.finish_reason == "stop" and out.token_ids == ref[:ref.index(eos) + 1]
    # The state it left for the next turn covers exactly its output: the follow-up is right (no NaN).
    nxt = engine.add_request(prompt + out.token_ids, SamplingParams(max_tokens=4, **GREEDY))
    again = _drain(engine)[nxt]
    assert again.token_ids == reference(prompt + out.token_ids, 4)
    assert engine.stats()["prefix_cache_hits"] > 0


def test_drafting_backs_off_when_nothing_is_accepted():
    class Wrong:
        def propose(self, items):
            return [[(expected_next(list(ids)) + 1) % 48] * k for ids, k in items]

    engine = _engine_with(Wrong(), k=4)
    rid = engine.add_request([2, 7], SamplingParams(max_tokens=200, **GREEDY))
    out = _drain(engine)[rid]
    assert out.token_ids == reference([2, 7], 200)
    st = engine.stats()
    assert st["spec_accepted_tokens"] == 0
    # Pauses of 1, 3, 7, ... steps: about log2(200) windows, never one per step.
    assert 4 <= st["spec_windows"] <= 10
    assert MAX_PAUSE >= 63


def test_penalties_and_logprobs_through_windows_match_plain_decoding():
    def run(proposer):
        engine = fake_engine(soft=True) if proposer is None else _engine_with(proposer, soft=True)
        params = SamplingParams(max_tokens=15, temperature=0.0, repetition_penalty=1.3, presence_penalty=0.5,
                                frequency_penalty=0.3, logprobs=3, ignore_eos=True)
        rid = engine.add_request([5, 9, 2], params)
        return _drain(engine)[rid], engine.stats()

    plain, _ = run(None)
    spec, st = run(ReplayProposer([5, 9, 2] + plain.token_ids, seed=2))
    assert plain.finish_reason == spec.finish_reason == "length"
    assert spec.token_ids == plain.token_ids
    assert [(lp.token_id, lp.logprob, lp.top) for lp in spec.logprobs] == \
        [(lp.token_id, lp.logprob, lp.top) for lp in plain.logprobs]
    assert 0 < st["spec_accepted_tokens"] < st["spec_drafted_tokens"]


def test_prompt_lookup():
    assert propose_ngram([1, 2, 3, 9, 9, 1, 2, 3], 3, 1, 3) == [9, 9, 1]
    assert propose_ngram([1, 2, 3, 4, 1, 2, 3], 2, 2, 2) == [4, 1]     # the latest earlier occurrence of [2, 3]
    assert propose_ngram([5, 1, 2, 7, 1, 2, 8, 1, 2], 2, 2, 2) == [8, 1]
    assert propose_ngram([1, 2, 3, 4], 3, 1, 2) == []                  # nothing recurs
    assert propose_ngram([7, 7, 7, 7], 4, 1, 3) == [7]                 # what follows the latest earlier [7, 7, 7]
    assert propose_ngram([1], 3, 1, 3) == []
    assert propose_ngram([4, 5, 6, 1, 5, 6], 2, 3, 3) == []            # only 2 tokens recur: below the minimum


def test_ngram_drafting_copies_a_repeated_output():
    """A prompt that ends where an earlier copy of the continuation sits: ngram drafts it, all accepted."""
    prompt = [3, 4]
    cont = reference(prompt, 30)
    doc = prompt + cont + [0] + prompt   # the continuation after the second [3, 4] is not the same...
    engine = fake_engine(speculative_config={"method": "ngram", "num_speculative_tokens": 4,
                                             "prompt_lookup_max": 3, "prompt_lookup_min": 1})
    rid = engine.add_request(doc, SamplingParams(max_tokens=20, **GREEDY))
    out = _drain(engine)[rid]
    assert out.token_ids == reference(doc, 20)   # ...whatever the drafts, the output is greedy's
    assert engine.stats()["spec_windows"] > 0


@pytest.mark.parametrize("bad,match", [
    ({"method": "eagle", "num_speculative_tokens": 2}, "method"),
    ({"method": "ngram"}, "num_speculative_tokens"),
    ({"method": "ngram", "num_speculative_tokens": 0}, "num_speculative_tokens"),
    ({"method": "ngram", "num_speculative_tokens": 99}, "num_speculative_tokens"),
    ({"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 4, "prompt_lookup_max": 2}, "prompt_lookup"),
    ({"method": "ngram", "num_speculative_tokens": 2, "lookup": 3}, "unknown key"),
    ({"method": "ngram", "num_speculative_tokens": 2, "draft_tensor_parallel_size": 2}, "one device"),
    ({"method": "ngram", "num_speculative_tokens": 2, "disable_by_batch_size": 0}, "disable_by_batch_size"),
    ({"method": "draft_model", "num_speculative_tokens": 2}, "needs \"model\""),
    ('{"method": "ngram", ', "not valid JSON"),
    ([1, 2], "JSON object"),
])
def test_bad_speculative_configs_are_clear_errors(bad, match):
    with pytest.raises(ValueError, match=match):
        fake_engine(speculative_config=bad)


def test_disable_by_batch_size_stops_drafting_for_full_batches():
    config = {"method": "ngram", "num_speculative_tokens": 3, "disable_by_batch_size": 2}
    engine = fake_engine(speculative_config=config, max_num_seqs=4)
    engine.drafter = Drafter(SpeculativeConfig.parse(config), OracleProposer(wrong=0.0))
    a = engine.add_request([1, 2], SamplingParams(max_tokens=30, **GREEDY))
    b = engine.add_request([3, 4], SamplingParams(max_tokens=30, **GREEDY))
    outs = _drain(engine)
    assert outs[a].token_ids == reference([1, 2], 30) and outs[b].token_ids == reference([3, 4], 30)
    assert engine.stats()["spec_windows"] == 0
    c = engine.add_request([5, 6], SamplingParams(max_tokens=30, **GREEDY))
    assert _drain(engine)[c].token_ids == reference([5, 6], 30)
    assert engine.stats()["spec_accepted_tokens"] > 0


def test_vllm_spellings_parse():
    c = SpeculativeConfig.parse('{"model": "[ngram]", "num_speculative_tokens": 3, "prompt_lookup_max": 4}')
    assert (c.method, c.num_speculative_tokens, c.prompt_lookup_min, c.prompt_lookup_max) == ("ngram", 3, 4, 4)
    d = SpeculativeConfig.parse({"model": "/x", "num_speculative_tokens": 2, "draft_tensor_parallel_size": 1,
                                 "acceptance_method": "rejection_sampler", "disable_by_batch_size": 8})
    assert d.method == "draft_model" and d.model == "/x" and d.disable_by_batch_size == 8
