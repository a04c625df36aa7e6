"""ForwardBatch's computed fields: built once on first read, then read as plain attributes (the lock-free
stand-in for functools.cached_property that torch.compile can trace; tests/model/test_compile.py)."""

from __future__ import annotations

import torch

from k3.layers import batch as batch_module
from k3.layers.batch import ForwardBatch


def test_a_computed_field_is_built_once_then_held_by_the_instance(monkeypatch):
    calls = []
    fn = batch_module.ForwardBatch.__dict__["starts"].fn
    monkeypatch.setattr(batch_module.ForwardBatch.__dict__["starts"], "fn", lambda self: calls.append(1) or fn(self))
    b = ForwardBatch(seq_lens=(3, 1, 2), context_lens=(0, 5, 0))
    assert b.starts == (0, 3, 4) and b.starts == (0, 3, 4)
    assert calls == [1]                       # computed on the first read only
    assert b.__dict__["starts"] == (0, 3, 4)  # held by the instance, so later reads skip the descriptor
    assert torch.equal(b.last_token_index, torch.tensor([2, 3, 5]))
    assert ForwardBatch(seq_lens=(2,), context_lens=(0,)).starts == (0,)   # per instance, never shared
