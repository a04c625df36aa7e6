"""Scheduler, cache and request bookkeeping, on a weightless model (milliseconds per test)."""

import pytest

from k3.engine import EngineConfig, LLMEngine, SamplingParams
from fake_model import POISON, FakeModel, drain as _drain, expected_next, fake_engine as _engine, reference as _reference

GREEDY = dict(temperature=0.0, ignore_eos=True)



@pytest.mark.parametrize("budget", [1, 3, 7, 1000])
@pytest.mark.parametrize("block_size", [1, 4, 16])
def test_tokens_follow_the_cached_history(budget, block_size):
    engine = _engine(max_num_seqs=3, max_num_batched_tokens=budget, block_size=block_size)
    prompts = [[1, 2, 3], list(range(20)), [7], list(range(5, 16))]
    ids = [engine.add_request(p, SamplingParams(max_tokens=9, **GREEDY)) for p in prompts]
    outs = _drain(engine)
    for rid, p in zip(ids, prompts):
        assert outs[rid].token_ids == _reference(p, 9), (budget, block_size, p)
        assert outs[rid].finish_reason == "length"
    assert engine.stats()["slots_free"] == 3 and engine.stats()["blocks_free"] == engine.capacity.num_blocks


def test_every_step_respects_the_token_budget_and_seq_limit():
    engine = _engine(max_num_seqs=2, max_num_batched_tokens=5)
    for p in ([1] * 12, [2] * 3, [3] * 4):
        engine.add_request(p, SamplingParams(max_tokens=4, **GREEDY))
    _drain(engine)
    for seq_lens, _ in engine.model.calls:
        assert sum(seq_lens) <= 5 and len(seq_lens) <= 2


def test_fcfs_with_budget_one():
    engine = _engine(max_num_seqs=3, max_num_batched_tokens=1)
    ids = [engine.add_request([i + 1], SamplingParams(max_tokens=5, **GREEDY)) for i in range(3)]
    order = [o.request_id for outs in iter(engine.step, []) for o in outs if o.finished]
    assert order == ids


def test_long_prefill_interleaves_with_decode():
    engine = _engine(max_num_seqs=2, max_num_batched_tokens=4)
    a = engine.add_request([1], SamplingParams(max_tokens=30, **GREEDY))
    engine.step()
    b = engine.add_request(list(range(1, 41)), SamplingParams(max_tokens=2, **GREEDY))
    for _ in range(12):  # B's 40-token prompt takes 3-token chunks; A decodes on every step meanwhile
        assert a in [o.request_id for o in engine.step()]
    assert all(n <= 3 for lens, _ in engine.model.calls[1:] for n in lens[1:])
    outs = _drain(engine)
    assert outs[b].token_ids == _reference(list(range(1, 41)), 2)


def test_waiting_requests_are_admitted_when_a_slot_frees():
    engine = _engine(max_num_seqs=1)
    a = engine.add_request([1, 2], SamplingParams(max_tokens=3, **GREEDY))
    b = engine.add_request([3], SamplingParams(max_tokens=2, **GREEDY))
    order = [o.request_id for outs in iter(engine.step, []) for o in outs if o.finished]
    assert order == [a, b]


def test_abort_running_and_waiting_frees_everything():
    engine = _engine(max_num_seqs=1)
    a = engine.add_request([1, 2, 3], SamplingParams(max_tokens=50, **GREEDY))
    b = engine.add_request([4], SamplingParams(max_tokens=50, **GREEDY))
    engine.step()
    engine.step()
    out_a, out_b = engine.abort(a), engine.abort(b)
    assert out_a.finish_reason == out_b.finish_reason == "abort" and out_a.finished
    assert len(out_a.token_ids) == 2 and out_b.token_ids == []
    assert not engine.has_unfinished() and engine.abort(a) is None
    s = engine.stats()
    assert s["slots_free"] == s["slots_total"] and s["blocks_free"] == s["blocks_total"]


def test_thousand_requests_leave_nothing_behind():
    engine = _engine(max_num_seqs=8, max_num_batched_tokens=64)
    for i in range(1000):
        engine.add_request([i % 40 + 1, 2], SamplingParams(max_tokens=2, **GREEDY))
        if i % 3 == 0:
            engine.step()
    outs = _drain(engine)
    s = engine.stats()
    assert s["finished"] == 1000 and not engine.requests
    assert s["slots_free"] == s["slots_total"] and s["blocks_free"] == s["blocks_total"]
    assert len(outs) > 0


def test_nan_fails_only_that_request():
    engine = _engine(max_num_seqs=4)
    good = engine.add_request([1, 2], SamplingParams(max_tokens=6, **GREEDY))
    bad = engine.add_request([5, POISON, 6], SamplingParams(max_tokens=6, **GREEDY))
    outs = _drain(engine)
    assert outs[bad].finish_reason == "error" and "non-finite" in outs[bad].error
    assert outs[good].finish_reason == "length" and outs[good].token_ids == _reference([1, 2], 6)


def test_stop_reasons():
    engine = LLMEngine(FakeModel(eos_token_id=expected_next([1, 2])), EngineConfig(cache_memory=1 << 20))
    eos = engine.add_request([1, 2], SamplingParams(max_tokens=5, temperature=0))
    ignore = engine.add_request([1, 2], SamplingParams(max_tokens=5, temperature=0, ignore_eos=True))
    stop_id = _reference([3], 3)[2]
    by_id = engine.add_request([3], SamplingParams(max_tokens=9, temperature=0, stop_token_ids=[stop_id]))
    outs = _drain(engine)
    assert outs[eos].finish_reason == "stop" and len(outs[eos].token_ids) == 1
    assert outs[ignore].finish_reason == "length" and len(outs[ignore].token_ids) == 5
    assert outs[by_id].finish_reason == "stop" and outs[by_id].token_ids[-1] == stop_id


class LetterTokenizer:
    def decode(self, ids):
        return "".join(chr(ord("a") + t % 26) for t in ids)


def test_stop_strings_need_a_tokenizer_and_truncate_text():
    with pytest.raises(ValueError, match="SamplingParams.stop"):
        _engine().add_request([1], SamplingParams(stop=["x"]))
    engine = LLMEngine(FakeModel(), EngineConfig(cache_memory=1 << 20), tokenizer=LetterTokenizer())
    full = LetterTokenizer().decode(_reference([1, 2], 12))
    stop = full[4:6]
    rid = engine.add_request([1, 2], SamplingParams(max_tokens=12, stop=[stop], **GREEDY))
    out = _drain(engine)[rid]
    assert out.finish_reason == "stop" and out.text == full[:full.find(stop)]


def test_capacity_errors_are_clear():
    with pytest.raises(ValueError, match="too small"):
        LLMEngine(FakeModel(), EngineConfig(cache_memory=100))
    engine = _engine(block_size=16)
    too_many = engine.capacity.max_cached_tokens + 1
    with pytest.raises(ValueError, match="max_tokens"):
        engine.add_request([1], SamplingParams(max_tokens=too_many))
    with pytest.raises(ValueError, match="prompt"):
        engine.add_request([], SamplingParams())
    with pytest.raises(ValueError, match="prompt"):
        engine.add_request([1, 999], SamplingParams())


def test_model_exception_fails_the_step_requests_not_the_engine():
    engine = _engine()
    rid = engine.add_request([1], SamplingParams(max_tokens=3, **GREEDY))
    engine.model.forward_batch = lambda *a, **kw: (_ for _ in ()).throw(RuntimeError("boom"))
    outs = engine.step()
    assert outs[0].request_id == rid and outs[0].finish_reason == "error" and "boom" in outs[0].error
    assert engine.stats()["slots_free"] == engine.stats()["slots_total"]
