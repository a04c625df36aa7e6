"""Saved sequence state (resume without re-prefilling) and state offload under memory pressure."""

from __future__ import annotations

import json
import os

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from k3.config.presets import tiny
from k3.engine import LLM, SamplingParams
from k3.engine.state_file import StateFileError
from k3.testing import make_checkpoint

GREEDY = dict(temperature=0.0, ignore_eos=True, logprobs=3)
PROMPT = [5, 17, 3, 88, 41, 2, 9, 60, 33, 7, 12]


def run(llm, prompts, max_tokens, **kw):
    return llm.generate(prompts, SamplingParams(max_tokens=max_tokens, **GREEDY), **kw)


def logprobs(out):
    return [lp.logprob for lp in out.logprobs]


def test_save_then_resume_equals_uninterrupted(tiny_checkpoint, tmp_path):
    llm = LLM(str(tiny_checkpoint), max_num_seqs=2, cache_memory="8MiB")
    full = run(llm, [PROMPT], 14)[0]
    first = run(llm, [PROMPT], 5, save_state=tmp_path / "s.state")[0]
    # A new engine and a fresh load of the model: nothing carried over but the file.
    again = LLM(str(tiny_checkpoint), max_num_seqs=2, cache_memory="8MiB")
    rest = again.generate(None, SamplingParams(max_tokens=9, **GREEDY), resume_from=tmp_path / "s.state")[0]
    assert first.token_ids + rest.token_ids == full.token_ids
    assert logprobs(first) + logprobs(rest) == logprobs(full)  # bit-identical
    assert rest.prompt_token_ids == PROMPT + first.token_ids
    assert again.engine.counters["prompt_tokens"] == 1  # only the pending token was computed


def test_resume_with_new_input_matches_a_full_prefill(tiny_checkpoint, tmp_path):
    llm = LLM(str(tiny_checkpoint), dtype=torch.float64, max_num_seqs=1, cache_memory="8MiB")
    first = run(llm, [PROMPT], 4, save_state=tmp_path / "s.state")[0]
    follow_up = PROMPT + first.token_ids + [70, 71, 72, 73, 74]
    resumed = run(llm, [follow_up], 6, resume_from=tmp_path / "s.state")[0]
    fresh = run(llm, [follow_up], 6)[0]
    assert resumed.token_ids == fresh.token_ids
    assert logprobs(resumed) == pytest.approx(logprobs(fresh), rel=1e-9)


def test_state_files_that_do_not_fit_are_refused(tiny_checkpoint, tmp_path):
    llm = LLM(str(tiny_checkpoint), max_num_seqs=1, cache_memory="8MiB")
    path = tmp_path / "s.state"
    first = run(llm, [PROMPT], 3, save_state=path)[0]
    other = LLM(str(make_checkpoint(tmp_path / "other", tiny(), seed=99)), max_num_seqs=1, cache_memory="8MiB")
    with pytest.raises(StateFileError, match="different model"):
        run(other, None, 2, resume_from=path)
    truncated = tmp_path / "cut.state"
    truncated.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(StateFileError, match="truncated or corrupt"):
        run(llm, None, 2, resume_from=truncated)
    with safe_open(str(path), "pt") as f:
        meta, tensors = f.metadata(), {k: f.get_tensor(k) for k in f.keys()}
    save_file(tensors, str(tmp_path / "v9.state"), metadata=meta | {"version": "9"})
    with pytest.raises(StateFileError, match="version"):
        run(llm, None, 2, resume_from=tmp_path / "v9.state")
    with pytest.raises(ValueError, match="must begin with the saved state's tokens"):
        run(llm, [[1, 2, 3, 4]], 2, resume_from=path)
    assert json.loads(meta["pending_ids"]) == first.token_ids[-1:]
    assert not list(tmp_path.glob("*.tmp"))


@pytest.mark.parametrize("tamper", ["scaled, digest recomputed", "signature removed", "token_ids relabelled",
                                    "pending_ids a string", "kda_layers a string", "no signature at all"])
def test_tampered_state_files_are_refused(tiny_checkpoint, tmp_path, tamper):
    """The second audit's tamperings (issue 42): each gave wrong tokens or a TypeError before."""
    import hashlib

    llm = LLM(str(tiny_checkpoint), max_num_seqs=1, cache_memory="8MiB")
    path = tmp_path / "s.state"
    first = run(llm, [PROMPT], 3, save_state=path)[0]
    with safe_open(str(path), "pt") as f:
        meta, tensors = f.metadata(), {k: f.get_tensor(k) for k in f.keys()}
    sig = "signature_hmac_sha256"
    if tamper == "scaled, digest recomputed":
        tensors = {k: v * 2 if v.is_floating_point() else v for k, v in tensors.items()}
        meta = meta | {sig: hashlib.sha256(repr(sorted(meta)).encode()).hexdigest()}
    elif tamper == "signature removed":
        meta = {k: v for k, v in meta.items() if k != sig}
    elif tamper == "token_ids relabelled":
        meta = meta | {"token_ids": json.dumps([t + 1 for t in json.loads(meta["token_ids"])])}
    elif tamper == "pending_ids a string":
        meta = meta | {"pending_ids": '"5"'}
    elif tamper == "kda_layers a string":
        meta = meta | {"kda_layers": '"5"'}
    else:
        meta = {k: v for k, v in meta.items() if k not in (sig, "tensors_blake2b")}
    bad = tmp_path / "bad.state"
    save_file(tensors, str(bad), metadata=meta)
    prompt = (json.loads(meta["token_ids"]) if tamper == "token_ids relabelled" else PROMPT + first.token_ids[:-1])
    with pytest.raises(StateFileError):
        run(llm, [prompt + [5]], 2, resume_from=bad)


PROMPTS = [[(7 * i + j) % 97 + 1 for j in range(3 + 5 * i)] for i in range(6)]


@pytest.mark.parametrize("budget", [512, 3])
def test_offloaded_state_gives_each_request_its_solo_tokens(tiny_checkpoint, tmp_path, budget):
    solo = LLM(str(tiny_checkpoint), max_num_seqs=1, cache_memory="8MiB")
    expected = [run(solo, [p], 10)[0] for p in PROMPTS]
    llm = LLM(str(tiny_checkpoint), max_num_seqs=6, max_resident_seqs=2, cache_memory="8MiB",
              max_num_batched_tokens=budget, state_offload_dir=str(tmp_path / "offload"))
    outs = run(llm, PROMPTS, 10)
    for got, want in zip(outs, expected):
        # Tokens equal; logprobs to fp32 rounding (batch shapes differ from the solo run, offload is exact:
        # see the bit-identical save/resume test).
        assert got.token_ids == want.token_ids
        assert logprobs(got) == pytest.approx(logprobs(want), rel=1e-5, abs=1e-5)
    stats = llm.engine.stats()
    assert stats["swap_outs"] > 0 and stats["swap_ins"] >= stats["swap_outs"]
    assert stats["slots_total"] == 2 and not os.listdir(tmp_path / "offload")


def test_offload_turns_on_when_state_does_not_fit(tiny_checkpoint):
    probe = LLM(str(tiny_checkpoint), max_num_seqs=1, cache_memory="8MiB")
    cap = probe.capacity
    block = cap.block_size * cap.token_bytes
    # Room for two sequences' KDA state and two one-block MLA tables: a third slot does not fit.
    llm = LLM(str(tiny_checkpoint), max_num_seqs=6, cache_memory=2 * cap.slot_bytes + 2 * block)
    assert llm.capacity.max_seqs == 2 and llm.engine.runner.offloader is not None
    short = [p[:12] for p in PROMPTS]
    outs = run(llm, short, 4)
    assert [o.token_ids for o in outs] == [run(probe, [p], 4)[0].token_ids for p in short]
