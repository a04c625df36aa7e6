"""Cross-implementation parity (spec §8): k3 vs mlx-lm's kimi_k3 on MLX-CPU, fp32, same checkpoint."""

import pytest
import torch

import k3
from k3.config.presets import tiny, tiny7
from k3.testing import assert_close, make_checkpoint
from k3.testing.oracle import mlx_logits

# Two configs: (A) tiny, AttnRes block 2 with boundaries at layers 2 and 4, MLA last;
# (B) tiny7, block 3 with a boundary at layers 3 and 6, the last two layers MLA.
CONFIGS = {"A-tiny": tiny(), "B-tiny7": tiny7()}


@pytest.fixture(scope="module", params=list(CONFIGS))
def case(request, tmp_path_factory):
    config = CONFIGS[request.param]
    d = make_checkpoint(tmp_path_factory.mktemp(request.param), config, seed=11)
    ids = torch.randint(0, config.vocab_size, (2, 70), generator=torch.Generator().manual_seed(5))
    return d, ids, k3.load(d, dtype=torch.float32)


def test_full_forward_matches_mlx(case):
    d, ids, model = case
    # 70 tokens: chunked KDA with a partial second chunk.
    assert_close("logits vs mlx-lm", model(ids).numpy(), mlx_logits(d, ids.numpy()), 1e-4)


def test_cached_decode_matches_mlx(case):
    d, ids, model = case
    ids = ids[:, :30]
    state = model.new_state(2)
    ours = torch.cat([model(ids[:, :24], state)] + [model(ids[:, t:t + 1], state) for t in range(24, 30)], 1)
    assert_close("decode vs mlx-lm", ours.numpy(), mlx_logits(d, ids.numpy(), decode_from=24), 1e-4)
