"""A bare model's decode state has one count of the tokens it holds (K3State.count): forward advances it,
and every MLA cache writes at that position instead of counting for itself (issue 48: the cache length had
two owners, hence a two-step step_rows/commit_decode); its step states are built from that count."""

import torch

import k3
from k3.model.dense_state import DenseMLACache, TokenCount
from k3.testing import assert_close

IDS = torch.tensor([[3, 17, 40, 9, 21], [1, 2, 3, 4, 5]])


def test_one_count_for_the_whole_state(tiny_checkpoint):
    model = k3.load(tiny_checkpoint)
    state = model.new_state(2)
    caches = [v for v in state.layers if isinstance(v, DenseMLACache)]
    assert caches and all(c.count is state.count for c in caches)
    full = model(IDS)
    first = model(IDS[:, :3], state)
    assert state.num_tokens == 3
    for t in (3, 4):                                # decode steps: the direct native path where it applies
        step = model(IDS[:, t:t + 1], state)
        assert state.num_tokens == t + 1
    assert_close("prefill of 3 against the full forward", first, full[:, :3], 1e-5)
    assert_close("the last decode step against the full forward", step[:, -1], full[:, -1], 1e-5)


def test_a_bare_models_cache_refuses_verify_windows_by_name():
    """Verify windows are the engine's: a bare model's dense MLA cache says so rather than placing rows wrong."""
    import pytest

    from k3.layers.state import StateLayout

    layout = StateLayout((), 1, 1, 1, 1, 1, (0,), 4, 2)
    cache = DenseMLACache(layout, TokenCount())
    assert cache.step_state(1, 1, torch.zeros(1, 6)).new_rows.tolist() == [0]   # one position: fine
    with pytest.raises(ValueError, match="holds no verify windows"):
        cache.step_state(1, 3, torch.zeros(1, 6))
