"""Sizing and building the prefix cache from the engine's settings: how much of cache_memory its KDA
snapshots get, and the index, store and optional disk tier it is made of."""

from __future__ import annotations

import logging

import torch

from k3.engine.prefix.cache import PrefixCache
from k3.engine.prefix.index import BlockIndex
from k3.engine.prefix.snapshots import SnapshotStore
from k3.engine.prefix.spill import SpilledSnapshots
from k3.layers.state import StateLayout

log = logging.getLogger("k3.engine")


def snapshot_bytes(layout: StateLayout, dtype: torch.dtype) -> int:
    """One snapshot: a KDA slot's worth (fp32 recurrent state, conv tails in the compute dtype)."""
    return layout.slot_bytes(torch.empty((), dtype=dtype).element_size())


def snapshot_budget(enabled: bool, asked: int | None, cache_memory: int, one_snapshot: int, seqs: int) -> int:
    """Bytes of cache_memory kept for snapshots. Default: a quarter, but at most half of what the `seqs`
    resident sequences' KDA slots leave (so the default never makes fewer sequences resident), and
    nothing if that holds no snapshot."""
    if not enabled:
        return 0
    if asked is None:
        auto = min(cache_memory // 4, max(0, cache_memory - seqs * one_snapshot) // 2)
        return auto if auto >= one_snapshot else 0
    return asked   # within 0..cache_memory (EngineConfig checked it)


def build_prefix_cache(budget: int, one_snapshot: int, block_size: int, spill_dir: str | None, spill_bytes: int,
                       fingerprint, dtype: torch.dtype, quiet: bool = False) -> PrefixCache:
    """fingerprint: a callable giving the model's fingerprint (computed only for a disk tier)."""
    spill = None if spill_dir is None else SpilledSnapshots(spill_dir, spill_bytes, block_size, fingerprint(), dtype)
    prefix = PrefixCache(BlockIndex(block_size), SnapshotStore(budget, one_snapshot, spill))
    if not prefix.store.enabled and not quiet:
        log.warning("prefix caching: prefix_cache_memory (%s B) holds no KDA snapshot (%s B each), so no prefix "
                    "can be reused; raise it or cache_memory", f"{budget:,}", f"{one_snapshot:,}")
    return prefix
