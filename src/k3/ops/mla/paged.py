"""Absorbed MLA decode over a paged latent cache, read in place: one new token per sequence, each
sequence with its own cached length, all in one call per layer.

The pool holds one row [c_kv (R), k_x (Dr)] per cached token; sequence i's position p is row
tables[i, p // block_size] * block_size + p % block_size, and it attends positions 0..lens[i]-1 (its
new token, already written, included). With q = [W_UK^T q_nope, q_x] per head:
  o_lat[i, h] = sum_s softmax_s(q[i, h] . row_s * scale) c_kv_s      ([n, H, R]; o = W_UV o_lat)
Reference: gather each sequence's rows and attend (a copy of the history per call). Native: reads the
rows where they are, splits long histories over threads by the sequence's own length only, and never
depends on batchmates. `k3.ops.dispatch` picks.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from k3.ops.dispatch import register
from k3.ops.harness import Example, randn
from k3.ops.native import native


@dataclass(frozen=True)
class PagedLatents:
    """n sequences' cached latents in a paged pool, ready for `mla_paged_decode`."""
    pool: torch.Tensor      # [rows, R + Dr]
    tables: torch.Tensor    # [n, max_blocks] int32 block ids
    lens: torch.Tensor      # [n] int32 positions to attend
    block_size: int
    rank: int               # R: the c_kv part of a row


def mla_paged_decode_reference(q: torch.Tensor, pool: torch.Tensor, tables: torch.Tensor, lens: torch.Tensor,
                               block_size: int, rank: int, scale: float) -> torch.Tensor:
    """q [n, H, R + Dr] -> o_lat [n, H, R] in q.dtype; softmax in fp32 (or wider)."""
    n, H, _ = q.shape
    out = q.new_empty((n, H, rank))
    sdt = torch.promote_types(q.dtype, torch.float32)
    for i, length in enumerate(lens.tolist()):
        pos = torch.arange(length, device=pool.device)
        rows = tables[i, pos // block_size].long() * block_size + pos % block_size
        lat = pool[rows].to(q.dtype)                                   # [S, R + Dr]
        p = torch.softmax((q[i] @ lat.T).to(sdt) * scale, dim=-1).to(q.dtype)
        out[i] = p @ lat[:, :rank]
    return out


def _native(q, pool, tables, lens, block_size, rank, scale):
    return native().mla_paged_decode(q.contiguous(), pool, tables, lens, block_size, rank, scale)


def paged_takes(pool: torch.Tensor, tables: torch.Tensor, lens: torch.Tensor) -> bool:
    """Whether the native kernel reads this cache as it is (fp32 queries given): what `supports` asks of it,
    for callers that have no query yet (the MLA layer's native step)."""
    return (pool.dtype in (torch.float32, torch.bfloat16) and pool.is_contiguous()
            and tables.dtype == torch.int32 and lens.dtype == torch.int32)


def _supports(q, pool, tables, lens, block_size, rank, scale) -> bool:
    return q.dtype == torch.float32 and paged_takes(pool, tables, lens)


def _paged_examples(large: bool) -> list[Example]:
    """Small: odd sizes for the tests. Large: K3's 96 heads over short ragged histories, and a long history
    (16K positions) at 16 heads, where the kernel splits one sequence over threads and memory matters."""
    R, Dr, bs = (512, 64, 16) if large else (13, 5, 4)
    cases = [(96, [300, 17]), (16, [16384])] if large else [(3, [9, 1, 6])]
    out = []
    for H, lens in cases:
        width = max(-(-x // bs) for x in lens)
        n = len(lens)
        blocks = n * width + 2   # every table row full width (rows past a length are never read), two spare
        order = torch.randperm(blocks, generator=torch.Generator().manual_seed(1)).to(torch.int32)
        tables = order[:n * width].view(n, width).contiguous()
        for dtype in (torch.float32, torch.bfloat16):
            pool = randn(blocks * bs, R + Dr, seed=2, dtype=dtype)
            out.append(Example(f"{n} sequences of {lens} tokens, {H} heads, pool {dtype}",
                               (randn(n, H, R + Dr, seed=3), pool, tables, torch.tensor(lens, dtype=torch.int32), bs,
                                R, (R + Dr) ** -0.5)))
    return out


mla_paged_decode = register("mla_paged_decode", examples=_paged_examples, reference=mla_paged_decode_reference, native=_native,
                            supports=_supports)


def write_rows(pool: torch.Tensor, rows: torch.Tensor, c_kv: torch.Tensor, k_x: torch.Tensor) -> None:
    """New latents c_kv [..., R] and k_x [..., Dr] (one row per new position, in order) into `pool` at `rows` [n]."""
    pool.index_copy_(0, rows, torch.cat((c_kv, k_x), dim=-1).reshape(rows.numel(), -1).to(pool.dtype))


def paged_decode(q: torch.Tensor, paged: PagedLatents, scale: float) -> torch.Tensor:
    return mla_paged_decode(q, paged.pool, paged.tables, paged.lens, paged.block_size, paged.rank, scale)
