"""Cross-implementation parity (spec section 8): k3 vs mlx-lm's kimi_k3 on MLX-CPU, fp32, same checkpoint."""

import pytest
import torch

import k3
from k3.config.presets import tiny
from k3.testing import assert_close, make_checkpoint
from mlx_oracle import mlx_logits

# Two configs: (A) tiny, AttnRes block 2 with boundaries at layers 2 and 4, MLA last;
# (B) 7 layers, block 3, wider heads, 9 experts top-3, routed scaling 2.5, the last two layers MLA.
CONFIGS = {
    "A-tiny": tiny(),
    "B-7layer": tiny(
        num_hidden_layers=7, hidden_size=64, layer_types=("kda", "kda", "kda", "mla", "kda", "mla", "mla"),
        mlp_types=("dense",) + ("moe",) * 6, attn_res_block_size=3, kda_num_heads=2, kda_head_dim=16,
        num_attention_heads=4, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16, q_lora_rank=32,
        kv_lora_rank=24, num_experts=9, num_experts_per_token=3, moe_intermediate_size=64,
        routed_expert_hidden_size=32, routed_scaling_factor=2.5, intermediate_size=83, vocab_size=211,
        eos_token_id=210),
}


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
