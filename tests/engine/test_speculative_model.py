"""Speculative decoding on real (tiny, random) K3 checkpoints: greedy output and its logits are bit for
bit those of plain decoding, whatever is accepted, with the checkpoint's bf16 weights and k3's native
kernels (whose sums never depend on the row count); the KDA state left after rejections is the plain
run's. With fp32 weights, or the PyTorch references, matmuls go to the BLAS, whose sums may depend on
the row count: the same tokens, logits within a relative 1e-5. Prefix caching, expert streaming, state offload and draft models
keep working."""

import pytest
import torch
from safetensors.torch import load_file

import k3
from k3.config.presets import tiny, tiny7
from k3.engine import LLM, SamplingParams
from k3.engine.speculative import Drafter, SpeculativeConfig
from k3.ops.dispatch import reference_only
from k3.streaming import plan_memory
from k3.testing import make_checkpoint
from k3.testing.tolerance import assert_close
from test_speculative_fake import ReplayProposer

NGRAM = {"method": "ngram", "num_speculative_tokens": 4}
PROMPTS = [[3, 1, 4, 1, 5, 9, 2, 6], [7] * 19, list(range(40, 73))]


def _params(n=14):
    return SamplingParams(max_tokens=n, temperature=0.0, logprobs=3, ignore_eos=True)


def _key(outs):
    """Tokens and every logprob (value and top alternatives): equal only if the logits rows are equal."""
    return [(o.token_ids, [(lp.token_id, lp.logprob, tuple(sorted(lp.top.items()))) for lp in o.logprobs])
            for o in outs]


def _replaying(llm, plain_outs, prompts, seed=0):
    seqs = {tuple(p): p + o.token_ids for p, o in zip(prompts, plain_outs)}

    class ByPrompt:
        def __init__(self):
            self.replays = {k: ReplayProposer(v, seed=seed, wrong=0.5) for k, v in seqs.items()}

        def propose(self, items):
            out = []
            for ids, k in items:
                key = max((key for key in self.replays if tuple(ids[:len(key)]) == key), key=len)
                out += self.replays[key].propose([(ids, k)])
            return out

    llm.engine.drafter = Drafter(SpeculativeConfig.parse(NGRAM), ByPrompt())
    return llm


@pytest.fixture(scope="module", params=[None, torch.float32], ids=["stored", "fp32"])
def model(tiny_checkpoint, request):
    return k3.load(tiny_checkpoint, dtype=request.param)


@pytest.mark.parametrize("kernels", ["native", "reference"])
def test_greedy_windows_are_bit_identical_to_plain_decoding(model, kernels, tmp_path):
    exact = model.lm_head.weight.dtype == torch.bfloat16 and kernels == "native"
    def run(spec, save):
        llm = LLM(model, cache_memory="16MiB", max_num_seqs=3, speculative_config=NGRAM if spec else None)
        if spec:
            _replaying(llm, plain, PROMPTS)
        return llm.generate(PROMPTS, _params(), save_state=[tmp_path / f"{save}{i}.safetensors" for i in range(3)]), llm

    with reference_only() if kernels == "reference" else _nothing():
        plain, _ = run(False, "plain")
        spec, llm = run(True, "spec")
    st = llm.engine.stats()
    assert 0 < st["spec_accepted_tokens"] < st["spec_drafted_tokens"]
    if not exact:
        assert [o.token_ids for o in spec] == [o.token_ids for o in plain]
        for a, b in zip(spec, plain):
            assert_close("logprobs with windows", torch.tensor([lp.logprob for lp in a.logprobs]),
                         torch.tensor([lp.logprob for lp in b.logprobs]), 1e-5)
        return
    assert _key(spec) == _key(plain)
    for i in range(3):   # the state each request ends with, rejected drafts undone, is the plain run's
        a, b = load_file(tmp_path / f"plain{i}.safetensors"), load_file(tmp_path / f"spec{i}.safetensors")
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def test_draft_model_is_the_target_itself_every_draft_is_accepted(tiny_checkpoint):
    model = k3.load(tiny_checkpoint)
    plain = LLM(model, cache_memory="16MiB").generate(PROMPTS, _params(20))
    llm = LLM(model, cache_memory="16MiB", speculative_config={"method": "draft_model", "model": model,
                                                               "num_speculative_tokens": 5})
    spec = llm.generate(PROMPTS, _params(20))
    assert _key(spec) == _key(plain)
    st = llm.engine.stats()
    assert st["spec_acceptance_rate"] == 1.0 and st["spec_mean_accepted_length"] > 4
    assert st["steps"] < 20


@pytest.fixture(scope="module")
def other_checkpoint(tmp_path_factory):
    """Another random model with the target's vocabulary: a drafter that is often wrong."""
    return make_checkpoint(tmp_path_factory.mktemp("draft"), tiny7(vocab_size=101, eos_token_id=100), seed=11)


def test_a_separate_draft_checkpoint_changes_nothing_but_speed(tiny_checkpoint, other_checkpoint):
    plain = LLM(tiny_checkpoint, cache_memory="16MiB").generate(PROMPTS, _params())
    llm = LLM(tiny_checkpoint, cache_memory="16MiB", speculative_config={
        "method": "draft_model", "model": str(other_checkpoint), "num_speculative_tokens": 3})
    assert _key(llm.generate(PROMPTS, _params())) == _key(plain)
    assert llm.engine.stats()["spec_drafted_tokens"] > 0


def test_draft_model_errors_name_the_problem(tiny_checkpoint, tmp_path):
    with pytest.raises(ValueError, match="not a checkpoint directory"):
        LLM(tiny_checkpoint, cache_memory="16MiB",
            speculative_config={"method": "draft_model", "model": str(tmp_path), "num_speculative_tokens": 2})
    small = make_checkpoint(tmp_path / "small", tiny(vocab_size=64), seed=3)
    with pytest.raises(ValueError, match="vocabulary"):
        LLM(tiny_checkpoint, cache_memory="16MiB",
            speculative_config={"method": "draft_model", "model": str(small), "num_speculative_tokens": 2})


def test_prefix_caching_and_state_offload_with_windows(tiny_checkpoint):
    m = k3.load(tiny_checkpoint)
    turn1 = [list(range(5, 45)), list(range(60, 95))]
    plain_llm = LLM(m, cache_memory="16MiB", max_num_seqs=2, max_resident_seqs=1)
    plain1 = plain_llm.generate(turn1, _params(10))
    turn2 = [p + o.token_ids + [9, 8, 7] for p, o in zip(turn1, plain1)]
    plain2 = plain_llm.generate(turn2, _params(10))
    llm = LLM(m, cache_memory="16MiB", max_num_seqs=2, max_resident_seqs=1, speculative_config=NGRAM)
    _replaying(llm, plain1 + plain2, turn1 + turn2, seed=4)
    spec1 = llm.generate(turn1, _params(10))
    spec2 = llm.generate(turn2, _params(10))
    assert _key(spec1 + spec2) == _key(plain1 + plain2)
    st = llm.engine.stats()
    assert st["prefix_cache_hits"] > 0 and st["spec_accepted_tokens"] > 0 and st["swap_outs"] > 0


def test_streamed_experts_with_windows_are_bit_identical(tmp_path):
    config = tiny(num_experts=13, num_experts_per_token=3)
    ckpt = make_checkpoint(tmp_path / "stream", config, seed=7)
    p = plan_memory(config, 10 ** 12)
    resident = LLM(str(ckpt), cache_memory="16MiB")
    plain = resident.generate(PROMPTS, _params())
    streamed = LLM(str(ckpt), cache_memory="16MiB", memory_budget=p.trunk_bytes + 4 * p.expert_bytes + (16 << 20),
                   speculative_config=NGRAM)
    assert streamed.model.memory_plan.mode == "stream-experts"
    _replaying(streamed, plain, PROMPTS, seed=2)
    assert _key(streamed.generate(PROMPTS, _params())) == _key(plain)
    st = streamed.engine.stats()
    assert st["spec_accepted_tokens"] > 0 and st["expert_bytes_read"] > 0


def test_stop_strings_aborts_and_sampled_logprobs_with_windows():
    from k3.defaults import default_model

    path = str(default_model())
    plain = LLM(path, cache_memory="64MiB")
    spec = LLM(path, cache_memory="64MiB", speculative_config={"method": "ngram", "num_speculative_tokens": 4,
                                                              "prompt_lookup_max": 3, "prompt_lookup_min": 1})
    prompt = "the world, the world, the world, and the"
    stop = SamplingParams(max_tokens=60, temperature=0.0, stop=["world, and"])
    a, b = plain.generate([prompt], stop)[0], spec.generate([prompt], stop)[0]
    assert (a.text, a.token_ids, a.finish_reason) == (b.text, b.token_ids, b.finish_reason)
    sampled = spec.generate([prompt] * 4, SamplingParams(max_tokens=30, temperature=0.9, top_p=0.9, logprobs=2,
                                                         seed=5, ignore_eos=True))
    for o in sampled:
        assert len(o.token_ids) == 30 and [lp.token_id for lp in o.logprobs] == o.token_ids
    engine = spec.engine
    rid = engine.add_request(spec.tokenizer.encode(prompt), SamplingParams(max_tokens=50, temperature=0.0))
    for _ in range(10):
        engine.step()
        if engine.requests[rid].draft_ids:
            break
    assert engine.requests[rid].draft_ids, "prompt lookup should draft from this repetitive prompt"
    assert engine.abort(rid).finish_reason == "abort"
    st = engine.stats()
    assert st["spec_windows"] > 0 and st["slots_free"] == engine.capacity.max_seqs and not engine.has_unfinished()


def _window_paths(monkeypatch) -> dict[str, int]:
    """How the engine's verify-window steps ran: the whole decode plan in one native call, or op by op; and
    how many KDA window steps ran as the layer's registered native step (op by op)."""
    import dataclasses

    import k3.layers.kda as kda
    import k3.model.k3 as k3_model

    counts = {"whole": 0, "op by op": 0, "native attention": 0}
    whole, step = k3_model.decode_in_one_call, kda.kda_layer_step

    def counted_whole(model, ids, batch, *rest):
        out = whole(model, ids, batch, *rest)
        if batch.windows:
            counts["whole" if out is not None else "op by op"] += 1
        return out

    def counted_step(layer, x, state):
        counts["native attention"] += state.positions > 1   # a window: several rows a sequence
        return step.native(layer, x, state)

    monkeypatch.setattr(k3_model, "decode_in_one_call", counted_whole)
    monkeypatch.setattr(kda, "kda_layer_step", dataclasses.replace(step, native=counted_step))
    return counts


def _modules_only(monkeypatch) -> None:
    """Every sublayer through its modules: no registered step takes a row."""
    import dataclasses

    import k3.layers.kda as kda
    import k3.layers.mla as mla

    for module, name in ((kda, "kda_layer_step"), (mla, "mla_layer_step")):
        monkeypatch.setattr(module, name, dataclasses.replace(getattr(module, name), supports=lambda *a: False))


class _Ragged:
    """Cuts the i-th draft of each proposal to 1 + i % 3 tokens: windows of several lengths in one step."""

    def __init__(self, inner):
        self.inner = inner

    def propose(self, items):
        return [d[:1 + i % 3] for i, d in enumerate(self.inner.propose(items))]


@pytest.mark.parametrize("batch", [1, 3])
def test_verify_windows_run_the_whole_plan_with_the_bits_of_every_other_path(tiny_checkpoint, monkeypatch, tmp_path,
                                                                            batch):
    """A step whose sequences are all verify windows of one length is one native call of the decode plan: its
    logits, and the KDA state left once rejected drafts are undone (replayed from the inputs the native step
    kept), are those of the plan op by op (each window's attention one native step), of the modules, and of
    plain decoding."""
    import k3.model.k3 as k3_model

    model = k3.load(tiny_checkpoint)
    prompts = PROMPTS[:batch]
    plain = LLM(model, cache_memory="16MiB", max_num_seqs=3).generate(prompts, _params(), save_state=[
        tmp_path / f"plain{i}.safetensors" for i in range(batch)])

    def run(tag):
        llm = _replaying(LLM(model, cache_memory="16MiB", max_num_seqs=3, speculative_config=NGRAM), plain, prompts)
        saves = [tmp_path / f"{tag}{i}.safetensors" for i in range(batch)]
        outs = llm.generate(prompts, _params(), save_state=saves)
        assert 0 < llm.engine.stats()["spec_accepted_tokens"] < llm.engine.stats()["spec_drafted_tokens"]
        return _key(outs), [load_file(p) for p in saves]

    counts = _window_paths(monkeypatch)
    whole = run("whole")
    assert counts["whole"] > 0 and counts["native attention"] == 0
    if batch == 1:
        assert counts["op by op"] == 0, "every window of a lone sequence is one native call"
    monkeypatch.setattr(k3_model, "decode_in_one_call", lambda *args: None)
    steps = run("steps")
    assert counts["native attention"] > 0, "op by op, a window's attention is one registered native step"
    _modules_only(monkeypatch)
    modules = run("modules")
    plain_states = [load_file(tmp_path / f"plain{i}.safetensors") for i in range(batch)]
    assert whole[0] == steps[0] == modules[0] == _key(plain)
    for states in zip(whole[1], steps[1], modules[1], plain_states):
        for a in states[1:]:
            assert a.keys() == states[0].keys() and all(torch.equal(a[k], states[0][k]) for k in a)


def test_windows_of_several_lengths_in_one_step_run_op_by_op_with_the_same_bits(tiny_checkpoint, monkeypatch):
    """Windows of different lengths (and sequences without drafts beside windows) are not one group: the plan
    runs op by op for them, with plain decoding's output."""
    model = k3.load(tiny_checkpoint)
    plain = LLM(model, cache_memory="16MiB", max_num_seqs=3).generate(PROMPTS, _params())
    llm = _replaying(LLM(model, cache_memory="16MiB", max_num_seqs=3, speculative_config=NGRAM), plain, PROMPTS)
    llm.engine.drafter.proposer = _Ragged(llm.engine.drafter.proposer)
    counts = _window_paths(monkeypatch)
    assert _key(llm.generate(PROMPTS, _params())) == _key(plain)
    assert counts["op by op"] > 0
