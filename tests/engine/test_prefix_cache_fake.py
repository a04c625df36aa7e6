"""Prefix caching's bookkeeping on the weightless model: its next token depends on every cached MLA
row and on the KDA token count, so reusing the wrong state (or a wrong amount of it) changes tokens."""

import os

import pytest

from k3.engine import EngineConfig, LLMEngine, SamplingParams
from fake_model import FakeModel, fake_engine, reference as _reference

GREEDY = dict(temperature=0.0, ignore_eos=True)


def _engine(**kw):
    kw.setdefault("block_size", 4)
    return fake_engine(**kw)


def _run(engine, prompts, n=5, **params):
    ids = [engine.add_request(p, SamplingParams(max_tokens=n, **GREEDY, **params)) for p in prompts]
    outs = {}
    while engine.has_unfinished():
        outs.update({o.request_id: o for o in engine.step() if o.finished})
    for rid, p in zip(ids, prompts):
        assert outs[rid].token_ids == _reference(p, n), p
    return [outs[r] for r in ids]


def _hits(engine):
    return engine.stats()["prefix_cache_hits"]


def test_the_next_turn_resumes_where_the_last_one_stopped():
    engine = _engine()
    first = list(range(1, 12))
    out = _run(engine, [first])[0]
    second = first + out.token_ids + [5, 6, 7]
    _run(engine, [second])
    # The finished request's state covers its prompt and all but its last token.
    assert _hits(engine) == len(first) + len(out.token_ids) - 1
    s = engine.stats()
    assert s["prefix_cache_queries"] == len(first) + len(second)
    assert s["prefix_cache_hit_rate"] == _hits(engine) / s["prefix_cache_queries"]


def test_a_resent_prompt_with_new_text_resumes_at_the_prompt_end():
    engine = _engine()
    first = list(range(1, 12))
    _run(engine, [first])
    _run(engine, [first + [40, 41]])        # the answer was not resent (a template that drops it)
    assert _hits(engine) == len(first)


def test_requests_sent_together_compute_their_shared_prefix_once():
    engine = _engine(max_num_batched_tokens=6)
    system = list(range(1, 19))              # 18 tokens: 4 full blocks of 4
    prompts = [system + [30 + i, 31 + i, 32] for i in range(5)]
    _run(engine, prompts)
    # The first is asked to snapshot at 16, where the shared blocks end; the others wait, resume there.
    assert _hits(engine) == 4 * 16
    assert engine.stats()["prompt_tokens"] == sum(map(len, prompts)) - _hits(engine)
    for calls in engine.model.calls:
        assert sum(calls[0]) <= 6


def test_a_shared_prefix_found_cached_becomes_a_branch_point():
    engine = _engine()
    system = list(range(1, 19))
    _run(engine, [system + [30, 31]])
    # The next finds 4 cached blocks but no snapshot at 16 (the first snapshotted at 20 and at its end):
    # it takes one there; the ones after it wait for that snapshot, then resume at 16.
    _run(engine, [system + [40 + i, 41] for i in range(4)])
    assert _hits(engine) == 3 * 16


def test_forced_hash_collisions_never_reuse_another_prefix():
    engine = _engine()
    engine.prefix_cache.index.block_hash = lambda parent, tokens: 7   # every block in one bucket
    a = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
    b = [1, 2, 3, 4, 9, 9, 9, 9, 9, 10]     # same first block, different second
    c = [2, 2, 3, 4, 5, 6, 7, 8, 9, 10]     # different first block, same second
    _run(engine, [a, b, c])
    assert _hits(engine) == 4                # b shares a's first block: a snapshots there, b resumes
    _run(engine, [a + [11, 12], b + [11, 12], c + [11, 12]])
    assert _hits(engine) == 4 + 3 * len(a)  # each from its own prompt's end, none from a lookalike


def test_eviction_under_pressure_keeps_every_answer_right():
    engine = _engine(cache_memory=24_000, max_num_seqs=2, prefix_cache_memory=600)
    prompts = [[(7 * i + j) % 45 + 1 for j in range(13)] for i in range(12)]
    _run(engine, prompts)
    _run(engine, [p + [3, 4] for p in prompts])   # most of those prefixes were evicted meanwhile
    s = engine.stats()
    assert s["prefix_snapshots_evicted"] > 0 and s["prefix_cache_snapshot_bytes"] <= 600
    assert s["blocks_free"] == s["blocks_total"] and s["slots_free"] == s["slots_total"]


def test_a_block_shared_by_two_running_requests_survives_one_aborting():
    engine = _engine(max_num_seqs=3)
    base = list(range(1, 14))
    _run(engine, [base])
    a = engine.add_request(base + [20], SamplingParams(max_tokens=8, **GREEDY))
    b = engine.add_request(base + [21], SamplingParams(max_tokens=8, **GREEDY))
    engine.step()
    engine.abort(a)
    outs = {}
    while engine.has_unfinished():
        outs.update({o.request_id: o for o in engine.step() if o.finished})
    assert outs[b].token_ids == _reference(base + [21], 8)
    assert _hits(engine) == 2 * len(base)


def test_an_abort_mid_prefill_leaves_a_usable_snapshot():
    engine = _engine(max_num_batched_tokens=5)
    prompt = list(range(1, 30))
    rid = engine.add_request(prompt, SamplingParams(max_tokens=3, **GREEDY))
    engine.step(), engine.step()
    engine.abort(rid)                        # 10 of 29 prompt tokens computed
    _run(engine, [prompt], n=3)
    assert _hits(engine) == 10


def test_state_offload_with_prefix_caching():
    engine = _engine(max_num_seqs=4, max_resident_seqs=1, cache_memory=60_000)
    base = list(range(1, 10))
    _run(engine, [base])
    _run(engine, [base + [i, i + 1] for i in range(4)], n=7)
    assert _hits(engine) > 0 and engine.stats()["swap_outs"] > 0


def test_turned_off_it_reuses_nothing_and_reports_nothing():
    engine = _engine(enable_prefix_caching=False)
    prompt = list(range(1, 12))
    _run(engine, [prompt, prompt + [1, 2]])
    assert "prefix_cache_hits" not in engine.stats() and engine.prefix_cache is None


def test_bad_prefix_cache_memory_is_a_clear_error():
    with pytest.raises(ValueError, match="prefix_cache_memory"):
        _engine(prefix_cache_memory=2 << 20)


def _spilling(tmp_path, **kw):
    # Room for one snapshot in memory: every earlier one goes to disk.
    return _engine(prefix_cache_memory=200, prefix_cache_spill_dir=str(tmp_path), **kw)


def test_a_snapshot_spilled_to_disk_is_read_back(tmp_path):
    engine = _spilling(tmp_path)
    first, other = list(range(1, 12)), list(range(20, 31))
    _run(engine, [first])
    _run(engine, [other])                    # evicts first's snapshots to disk
    s = engine.stats()
    assert s["prefix_spill_writes"] >= 2 and s["prefix_cache_snapshot_bytes"] <= 200
    _run(engine, [first + [3, 4]])
    assert engine.stats()["prefix_spill_reads"] == 1 and _hits(engine) == len(first)


def test_a_restarted_engine_resumes_from_spilled_files_and_refuses_bad_ones(tmp_path):
    engine = _spilling(tmp_path)
    first = list(range(1, 12))
    _run(engine, [first])
    _run(engine, [list(range(20, 31)), list(range(30, 41))])
    engine.prefix_cache.store.spill.close()   # writes finished
    files = sorted(tmp_path.glob("*.safetensors"))
    assert files
    again = _spilling(tmp_path)
    _run(again, [first + [3, 4]])
    assert _hits(again) == len(first)
    for i, f in enumerate(files):             # a cut or flipped file is a miss, never wrong state
        data = bytearray(f.read_bytes())
        data[-1] ^= 1
        f.write_bytes(data if i % 2 else data[:40])
    third = _spilling(tmp_path)
    _run(third, [first + [3, 4], list(range(30, 41)) + [5]])
    assert _hits(third) == 0 and third.stats()["prefix_spill_rejected"] >= 1


def test_blocks_reused_under_pressure_spill_their_snapshots_first(tmp_path):
    engine = _engine(cache_memory=8_000, max_num_seqs=1, prefix_cache_memory=4_000,
                     prefix_cache_spill_dir=str(tmp_path))
    prompts = [[(5 * i + j) % 45 + 1 for j in range(9)] for i in range(16)]
    _run(engine, prompts)
    _run(engine, [prompts[0] + [2, 3]])
    s = engine.stats()
    assert s["prefix_spill_writes"] > 0 and _hits(engine) == len(prompts[0])


def test_close_leaves_the_memory_snapshots_on_disk_for_the_next_engine(tmp_path):
    engine = _engine(prefix_cache_spill_dir=str(tmp_path))
    first = list(range(1, 12))
    out = _run(engine, [first])[0]
    engine.close()
    again = _engine(prefix_cache_spill_dir=str(tmp_path))
    _run(again, [first + out.token_ids + [5]])
    assert _hits(again) == len(first) + len(out.token_ids) - 1


def test_spilled_snapshots_of_another_model_are_not_used(tmp_path):
    engine = _engine(prefix_cache_spill_dir=str(tmp_path))
    first = list(range(1, 12))
    _run(engine, [first])
    engine.close()
    other = LLMEngine(FakeModel(eos_token_id=47), EngineConfig(cache_memory=1 << 20, block_size=4,
                                                              prefix_cache_spill_dir=str(tmp_path)))   # another config: another fingerprint
    _run(other, [first + [5]])
    assert _hits(other) == 0 and other.stats()["prefix_spill_files"] == 0


def test_a_request_resumed_from_saved_state_caches_its_prefix_for_others(tmp_path):
    from k3.engine.state_file import load_state

    engine = _engine()
    first = list(range(1, 12))
    rid = engine.add_request(first, SamplingParams(max_tokens=4, **GREEDY), save_state_path=str(tmp_path / "s"))
    while engine.has_unfinished():
        engine.step()
    state = load_state(tmp_path / "s", engine.fingerprint, engine.model.compute_dtype)
    fresh = _engine()                                   # a new engine: nothing cached
    prompt = state.token_ids + state.pending_ids + [9, 9]
    resumed = fresh.add_request(prompt, SamplingParams(max_tokens=4, **GREEDY), resume_state=state)
    outs = {}
    while fresh.has_unfinished():
        outs.update({o.request_id: o for o in fresh.step() if o.finished})
    assert outs[resumed].token_ids == _reference(prompt, 4) and rid
    assert _hits(fresh) == 0                            # resumed from the file, not looked up
    _run(fresh, [prompt + [3]])                         # its prompt end was snapshotted
    assert _hits(fresh) == len(prompt)


def test_a_snapshot_budget_that_leaves_too_little_cache_says_so():
    with pytest.raises(ValueError, match="lower prefix_cache_memory"):
        _engine(cache_memory=1000, prefix_cache_memory=990)


def test_a_spill_dir_that_is_a_file_is_a_clear_error(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(ValueError, match="prefix_cache_spill_dir .* cannot write there"):
        _engine(prefix_cache_spill_dir=str(tmp_path / "f"))


def test_malformed_spill_metadata_is_a_miss_and_the_directory_is_private(tmp_path):
    """Issue 42: spilled files whose metadata has the wrong types (or was relabelled) were TypeErrors that killed
    the engine's step, or wrong state; now a miss. The spill directory is made private, and one another user
    owns is refused."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    spill = tmp_path / "spill"
    engine = _spilling(spill)
    first = list(range(1, 12))
    _run(engine, [first])
    _run(engine, [list(range(20, 31)), list(range(30, 41))])
    engine.prefix_cache.store.spill.close()
    assert os.stat(spill).st_mode & 0o777 == 0o700
    for i, f in enumerate(sorted(spill.glob("*.safetensors"))):
        with safe_open(str(f), "pt") as g:
            meta, tensors = g.metadata(), {k: g.get_tensor(k) for k in g.keys()}
        meta = meta | ({"pending_ids": '"5"'} if i % 2 else {"kda_layers": '"5"'})
        save_file(tensors, str(f), metadata=meta)
    again = _spilling(spill)
    outs = _run(again, [first + [3, 4]])
    assert outs[0].finish_reason != "error" and _hits(again) == 0
    if os.geteuid() == 0:
        other = tmp_path / "theirs"
        other.mkdir()
        os.chown(other, 12345, 12345)
        with pytest.raises(ValueError, match="owned by another user"):
            _spilling(other)


def test_the_spill_directory_reads_only_regular_files_of_its_own(tmp_path):
    """Issue 69: a dangling symlink named *.safetensors stopped the engine at start with a traceback, and a
    symlink to a FIFO hung it for good. Links, FIFOs and folders are passed over (with a warning); a link to a
    real spilled file is not followed either: only files written there are read."""
    spill, elsewhere = tmp_path / "spill", tmp_path / "elsewhere"
    engine = _spilling(elsewhere)
    first = list(range(1, 12))
    _run(engine, [first])
    _run(engine, [list(range(20, 31)), list(range(30, 41))])
    engine.prefix_cache.store.spill.close()
    spill.mkdir(mode=0o700)
    os.mkfifo(tmp_path / "fifo")
    (spill / "dangling.safetensors").symlink_to(tmp_path / "missing")
    (spill / "to-fifo.safetensors").symlink_to(tmp_path / "fifo")
    os.mkfifo(spill / "fifo.safetensors")
    (spill / "folder.safetensors").mkdir()
    for i, f in enumerate(sorted(elsewhere.glob("*.safetensors"))):
        (spill / f"linked-{i}.safetensors").symlink_to(f)
    again = _spilling(spill)
    assert again.stats()["prefix_spill_files"] == 0
    _run(again, [first + [3, 4]])
    assert _hits(again) == 0
