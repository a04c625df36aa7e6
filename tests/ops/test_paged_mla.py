"""MLA decode over a paged cache read in place: native against the reference, and both against
today's path (gather each sequence's history, then absorbed MLA), for ragged lengths and odd block sizes."""

from __future__ import annotations

import pytest
import torch

from k3.ops.linear import head_linear
from k3.ops.mla import mla_absorbed, mla_paged_decode, mla_paged_decode_reference
from k3.testing import assert_close

H, DN, DR, R, DV = 3, 8, 5, 12, 7     # odd, all different


def _paged(lens: list[int], block_size: int, dtype, gen):
    """A pool with the sequences' blocks scattered in shuffled order, plus the tables that find them."""
    need = [-(-n // block_size) for n in lens]
    order = torch.randperm(sum(need) + 3, generator=gen)                  # 3 blocks nobody owns
    pool = torch.randn((sum(need) + 3) * block_size, R + DR, generator=gen).to(dtype)
    tables = torch.zeros(len(lens), max(need), dtype=torch.int32)
    start = 0
    for i, b in enumerate(need):
        tables[i, :b] = order[start:start + b].to(torch.int32)
        start += b
    return pool, tables, torch.tensor(lens, dtype=torch.int32)


def _gathered(pool, tables, i, length, block_size):
    pos = torch.arange(length)
    return pool[tables[i, pos // block_size].long() * block_size + pos % block_size].float()


@pytest.mark.parametrize("block_size", [1, 3, 16])
@pytest.mark.parametrize("lens", [[1], [5, 17, 2], [1300, 7, 513]])   # long ones split into parts
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_paged_decode_matches_reference_and_the_gather_path(kernels, level, block_size, lens, dtype):
    gen = torch.Generator().manual_seed(sum(lens) + block_size)
    pool, tables, lens_t = _paged(lens, block_size, dtype, gen)
    n = len(lens)
    q_nope, q_x = torch.randn(n, 1, H, DN, generator=gen), torch.randn(n, 1, H, DR, generator=gen)
    w_uk, w_uv = torch.randn(H, DN, R, generator=gen), torch.randn(H, DV, R, generator=gen)
    scale = (DN + DR) ** -0.5
    q = torch.cat((head_linear(q_nope, w_uk, transpose=True), q_x), dim=-1)[:, 0]    # [n, H, R + Dr]
    before = pool.clone()
    assert mla_paged_decode.use_native(q, pool, tables, lens_t, block_size, R, scale)
    native_out = mla_paged_decode(q, pool, tables, lens_t, block_size, R, scale)
    ref_out = mla_paged_decode_reference(q, pool, tables, lens_t, block_size, R, scale)
    assert torch.equal(pool, before), "decode wrote the cache"
    assert_close("native vs reference", native_out, ref_out, 2e-6)
    for i, length in enumerate(lens):
        lat = _gathered(pool, tables, i, length, block_size)
        expect = mla_absorbed(q_nope[i:i + 1], q_x[i:i + 1], lat[None, :, :R], lat[None, :, R:], w_uk, w_uv,
                              scale, length - 1)[0, 0]
        assert_close(f"sequence {i} vs gather+absorbed", head_linear(native_out[i:i + 1], w_uv)[0], expect, 2e-5)


def test_a_sequence_does_not_depend_on_its_batchmates(kernels):
    gen = torch.Generator().manual_seed(3)
    pool, tables, lens = _paged([900, 40, 3000], 16, torch.float32, gen)
    q = torch.randn(3, H, R + DR, generator=gen)
    together = mla_paged_decode(q, pool, tables, lens, 16, R, 0.3)
    for i in range(3):
        alone = mla_paged_decode(q[i:i + 1], pool, tables[i:i + 1], lens[i:i + 1], 16, R, 0.3)
        assert torch.equal(alone[0], together[i])


def test_bad_tables_are_refused(kernels):
    gen = torch.Generator().manual_seed(4)
    pool, tables, lens = _paged([20], 4, torch.float32, gen)
    q = torch.randn(1, H, R + DR)
    with pytest.raises(RuntimeError, match="outside the pool"):
        mla_paged_decode(q, pool, tables + 1000, lens, 4, R, 0.3)
    with pytest.raises(RuntimeError, match="outside 1.."):
        mla_paged_decode(q, pool, tables, lens + 100, 4, R, 0.3)


@pytest.mark.parametrize("heads", [16, 27])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_k3_width_rows_packed_or_scattered_give_the_same_bits(kernels, level, dtype, heads):
    """K3's 576-wide latent rows (512 + 64) take a form of their own when a group of 16 rows lies one after
    another (blocks of 64), and more than 16 heads share each row value between two head vectors: the
    same sums as tiles whose rows are scattered (blocks of 4, nothing prefetched), and the reference's
    values. 1100 positions: two or three parts (by heads), a tail tile shorter than a row group."""
    gen = torch.Generator().manual_seed(5)
    rank, extra, length = 512, 64, 1100
    rows = torch.randn(length, rank + extra, generator=gen).to(dtype)
    q = torch.randn(1, heads, rank + extra, generator=gen)
    out = {}
    for block_size in (64, 4):
        blocks = -(-length // block_size)
        order = torch.randperm(blocks, generator=gen)
        pool = torch.zeros(blocks * block_size, rank + extra, dtype=dtype)
        for b in range(blocks):
            part = rows[b * block_size:(b + 1) * block_size]
            pool[order[b] * block_size:order[b] * block_size + part.shape[0]] = part
        tables, lens = order.to(torch.int32).view(1, -1), torch.tensor([length], dtype=torch.int32)
        out[block_size] = mla_paged_decode(q, pool, tables, lens, block_size, rank, 0.04)
        ref = mla_paged_decode_reference(q, pool, tables, lens, block_size, rank, 0.04)
        assert_close(f"blocks of {block_size}", out[block_size], ref, 2e-6)
    assert torch.equal(out[64], out[4])
