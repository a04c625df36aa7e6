"""K3ForCausalLM.forward(..., logits_to_keep=n): only the last n positions' logits (transformers' name)."""

import pytest
import torch

import k3

IDS = torch.tensor([[3, 17, 40, 9, 21, 2, 33], [1, 2, 3, 4, 5, 6, 7]])


def test_logits_to_keep_returns_the_last_positions(tiny_checkpoint):
    model = k3.load(tiny_checkpoint)
    full = model(IDS)
    assert torch.equal(model(IDS, logits_to_keep=2), full[:, -2:])
    assert torch.equal(model(IDS, logits_to_keep=99), full)
    state = model.new_state(2)
    last = model(IDS, state, logits_to_keep=1)
    assert last.shape == (2, 1, full.shape[-1]) and state.num_tokens == IDS.shape[1]
    with pytest.raises(ValueError, match="logits_to_keep"):
        model(IDS, logits_to_keep=-1)
