"""Model-level invariances the engine relies on (tiny odd config, real loader)."""

import pytest
import torch

import k3
from k3.testing import assert_close, rel_l2
from k3.testing.oracle import mlx_logits


@pytest.fixture(scope="module")
def models(tiny_checkpoint):
    return {dt: k3.load(tiny_checkpoint, dtype=dt) for dt in (torch.float64, torch.float32)}


def _ids(B, T, seed=0):
    return torch.randint(0, 101, (B, T), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-10), (torch.float32, 2e-5)], ids=["fp64", "fp32"])
def test_chunked_prefill_then_decode_equals_full_forward(models, dtype, tol):
    model = models[dtype]
    ids = _ids(2, 45)
    full = model(ids)
    state = model.new_state(2)
    # 30 tokens take the chunked KDA path, 9 more a second (recurrent) prefill, then 6 decode steps.
    parts = [model(ids[:, :30], state), model(ids[:, 30:39], state)]
    parts += [model(ids[:, t:t + 1], state) for t in range(39, 45)]
    assert state.num_tokens == 45
    assert_close("cached", torch.cat(parts, 1), full, tol)


def test_batch_of_two_equals_each_alone(models):
    model = models[torch.float64]
    ids = torch.cat([_ids(1, 23, 1), _ids(1, 23, 2)])
    batched = model(ids)
    for b in range(2):
        assert_close(f"seq {b}", batched[b:b + 1], model(ids[b:b + 1]), 1e-12)


def test_cached_batch_equals_each_alone(models):
    model = models[torch.float64]
    ids = torch.cat([_ids(1, 20, 3), _ids(1, 20, 4)])
    state = model.new_state(2)
    model(ids[:, :18], state)
    step = model(ids[:, 18:19], state)
    for b in range(2):
        alone = model(ids[b:b + 1, :19])
        assert_close(f"seq {b}", step[b], alone[0, -1:], 1e-12)


def test_default_dtype_keeps_bf16_weights_and_computes_fp32(tiny_checkpoint, models):
    model = k3.load(tiny_checkpoint)
    assert model.compute_dtype == torch.float32
    assert model.lm_head.weight.dtype == torch.bfloat16
    assert model.model.layers[0].self_attn.A_log.dtype == torch.float32
    assert model.model.layers[1].block_sparse_moe.experts.w1_packed.dtype == torch.uint8
    ids = _ids(1, 19)
    # bf16 checkpoint values upcast exactly, so the compact model is the fp32 model, up to fp32
    # summation order (decode-sized products run in the native GEMV, the fp32 model in MKL).
    assert_close("compact vs fp32", model(ids), models[torch.float32](ids), 2e-5)


def test_bf16_error_is_no_worse_than_mlx_bf16(tiny_checkpoint, models):
    # bf16 rounding alone moves this random model's logits by ~10%; judge k3's bf16 precision
    # contract against an independent bf16 implementation on the same checkpoint.
    model = k3.load(tiny_checkpoint, dtype=torch.bfloat16)
    assert model.model.layers[0].self_attn.dt_bias.dtype == torch.float32
    assert model.lm_head.weight.dtype == torch.bfloat16
    ids = _ids(1, 19)
    exact = models[torch.float64](ids)
    ours = model(ids)
    assert ours.dtype == torch.bfloat16
    theirs = mlx_logits(tiny_checkpoint, ids.numpy(), dtype="bfloat16")
    assert rel_l2(ours.float(), exact) <= 2 * rel_l2(theirs, exact)


def test_bad_input_ids_raise_value_error(models):
    model = models[torch.float32]
    with pytest.raises(ValueError, match="token ids"):
        model(torch.tensor([[0, 101]]))
    with pytest.raises(ValueError, match="batch, tokens"):
        model(torch.tensor([1, 2]))
    with pytest.raises(ValueError, match="sequences"):
        model(_ids(2, 3), model.new_state(1))
