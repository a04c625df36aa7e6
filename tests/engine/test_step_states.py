"""The runner builds each step's decode-row state from its cache pools (engine/memory/step_states.py) and the
layers only read it: a decode step and a verify-window step never call the engine's per-layer views, which
serve prefill segments alone. The step states name the pool rows a real decode would write, and a bare
model's dense state builds the same kind of step states itself."""

import pytest
import torch

import k3
from k3.engine import LLM, SamplingParams
from k3.engine.memory import blocks, slots
from k3.layers.batch import ForwardBatch
from k3.layers.step_state import KdaStep, MlaStep

PROMPTS = [[3, 1, 4, 1, 5, 9, 2, 6], [7, 7, 7, 7, 7, 7]]


def _refuse_views(monkeypatch, calls: list) -> None:
    """Every prefill-view method records that it was called (and still works)."""
    for cls, names in ((slots.SlotView, ("gather", "scatter")), (blocks.PagedMLAView, ("extend",))):
        for name in names:
            real = getattr(cls, name)

            def counted(self, *a, _real=real, _name=name, **kw):
                calls.append(_name)
                return _real(self, *a, **kw)

            monkeypatch.setattr(cls, name, counted)


@pytest.mark.parametrize("speculative", [None, {"method": "ngram", "num_speculative_tokens": 3}])
def test_decode_rows_never_call_the_engines_views(tiny_checkpoint, monkeypatch, speculative):
    model = k3.load(tiny_checkpoint)
    llm = LLM(model, max_num_seqs=2, speculative_config=speculative)
    engine = llm.engine
    for i, p in enumerate(PROMPTS):
        engine.add_request(p, SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True), str(i))
    calls: list = []
    prefilled = False
    while engine.has_unfinished():
        if prefilled:
            _refuse_views(monkeypatch, calls)
        engine.step()
        running = engine.scheduler.running
        prefilled = prefilled or (len(running) == 2 and all(r.num_computed >= len(r.prompt_ids) for r in running))
    assert prefilled
    assert calls == [], f"decode rows went through the engine's views: {sorted(set(calls))}"


def test_step_states_name_the_rows_a_decode_writes(tiny_checkpoint):
    """One decode row and a verify window of 3 in one step: one state per step group, per layer; the MLA
    new rows are the pool rows of each sequence's next positions, and the KDA index its slot."""
    from k3.engine.memory.allocator import Placement
    from k3.engine.memory.manager import CachePools, Capacity
    from k3.engine.memory.step_states import build_step_states

    model = k3.load(tiny_checkpoint)
    layout = model.state_layout()
    pools = CachePools(layout, Capacity(4, 8, 4, 0, 0), torch.float32, torch.device("cpu"))

    placements = [Placement(2, (5, 1)), Placement(0, (3, 6, 7))]
    for p in placements:
        pools.place(p)
    batch = ForwardBatch((1, 3), (5, 6), windows=(False, True))
    step = pools.step_index(placements, batch.context_lens)
    states = build_step_states(pools, step, batch, model.config.num_hidden_layers, torch.empty(0))
    assert [len(s) for s in states] == [2] * model.config.num_hidden_layers
    for i, (decode, window) in enumerate(states):
        if i in layout.kda_layers:
            assert isinstance(decode, KdaStep) and decode.index.tolist() == [2] and decode.replay == ()
            assert window.index.tolist() == [0] and window.positions == 3 and len(window.replay) == 5
            assert decode.recurrent.data_ptr() == pools.slots.recurrent[i].data_ptr()
        else:
            assert isinstance(decode, MlaStep)
            assert decode.new_rows.tolist() == [1 * 4 + 1]                  # position 5: block 1, row 1
            assert window.new_rows.tolist() == [6 * 4 + 2, 6 * 4 + 3, 7 * 4 + 0]   # positions 6, 7, 8
            assert window.lens.tolist() == [7, 8, 9] and decode.lens.tolist() == [6]


def test_a_bare_models_state_builds_its_own_step_states(tiny_checkpoint):
    """model(ids, state) builds its decode rows' step states from the dense state; forward_batch given a
    state but no step states for its decode rows says what is missing instead of decoding from zeros."""
    model = k3.load(tiny_checkpoint)
    state = model.new_state(2)
    with torch.inference_mode():
        model(torch.tensor([[3, 4, 5], [6, 7, 8]]), state)
        batch = ForwardBatch.uniform(2, 1, state.num_tokens)
        built = state.step_states(batch, torch.empty(0))
        assert all(len(s) == 1 for s in built)
        with pytest.raises(ValueError, match="step states"):
            model.forward_batch(torch.tensor([1, 2]), batch, state.layers)
        with pytest.raises(ValueError, match="advances every sequence together"):
            state.step_states(ForwardBatch((1, 2), (3, 3)), torch.empty(0))
