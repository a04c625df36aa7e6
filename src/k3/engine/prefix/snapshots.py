"""KDA snapshots for prefix caching, kept in memory under a byte budget.

KDA state is a recurrence, not per-token rows, so a prefix is reusable only where a snapshot of the
recurrent matrices and conv tails at exactly its end exists. A snapshot at position p hangs on the
`CachedBlock` of the last full block before p (or on the root, for p < block_size), keyed by the
tail tokens between that block's end and p. The MLA rows of the full blocks stay in the shared
cache blocks; the tail's rows (fewer than block_size) are copied into the snapshot, because the
block that held them is still its request's to write (copy on write: a resuming request gets them
written into a block of its own).

Over budget, the least recently used snapshot goes; with a `SpilledSnapshots` tier it is first
written to disk whole (KDA state and every MLA row of its prefix, in the saved-state format).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import torch

from k3.engine.prefix.index import CachedBlock
from k3.engine.memory.sequence_state import SequenceState


@dataclass(eq=False)
class Snapshot:
    holder: CachedBlock | None     # last full block before the position; None: the root
    tail: tuple[int, ...]          # tokens after the holder's end, up to the position
    kda: dict[int, tuple[torch.Tensor, tuple[torch.Tensor, ...]]]
    tail_rows: dict[int, torch.Tensor]   # MLA layer -> rows [len(tail), width]
    nbytes: int

    @property
    def num_tokens(self) -> int:
        return (self.holder.end if self.holder else 0) + len(self.tail)


def chain_of(entry: CachedBlock | None) -> list[CachedBlock]:
    out = []
    while entry is not None:
        out.append(entry)
        entry = entry.parent
    return out[::-1]


class SnapshotStore:
    def __init__(self, budget_bytes: int, snapshot_bytes: int, spill=None):
        """snapshot_bytes: one KDA slot's worth (what a snapshot takes, tail rows aside).
        spill: a SpilledSnapshots or None."""
        self.budget_bytes, self.snapshot_bytes, self.spill = budget_bytes, snapshot_bytes, spill
        self.root: dict[tuple[int, ...], Snapshot] = {}
        self._lru: OrderedDict[Snapshot, None] = OrderedDict()
        self.nbytes = 0
        self.export_mla = None   # set by the runner: (blocks, num_tokens) -> {layer: rows}
        self.counters = {"prefix_snapshots_taken": 0, "prefix_snapshots_evicted": 0}

    @property
    def enabled(self) -> bool:
        return self.snapshot_bytes <= self.budget_bytes

    def __len__(self) -> int:
        return len(self._lru)

    def holder_map(self, holder: CachedBlock | None) -> dict:
        return holder.snapshots if holder is not None else self.root

    def find(self, holder: CachedBlock | None, tail: tuple[int, ...]) -> Snapshot | None:
        return self.holder_map(holder).get(tail)

    def add(self, holder: CachedBlock | None, tail: tuple[int, ...], kda, tail_rows) -> Snapshot | None:
        """Keep a snapshot (tensors already copied), evicting least recently used ones to stay in budget."""
        if not self.enabled or (holder is not None and not holder.registered):
            return None
        nbytes = SequenceState([], [], kda, tail_rows).nbytes
        if nbytes > self.budget_bytes:
            return None
        while self._lru and self.nbytes + nbytes > self.budget_bytes:
            self.evict(next(iter(self._lru)))
        snap = Snapshot(holder, tail, kda, tail_rows, nbytes)
        self.holder_map(holder)[tail] = snap
        self._lru[snap] = None
        self.nbytes += nbytes
        self.counters["prefix_snapshots_taken"] += 1
        return snap

    def touch(self, snap: Snapshot) -> None:
        if snap in self._lru:
            self._lru.move_to_end(snap)

    def evict(self, snap: Snapshot) -> None:
        """Remove a snapshot for room, or because its holder block is about to be reused (call before
        anything overwrites it): written to the disk tier first, if there is one."""
        if snap not in self._lru:
            return
        if self.spill is not None and self.export_mla is not None:
            self.spill.put(self._whole(snap))
        del self._lru[snap]
        self.nbytes -= snap.nbytes
        self.holder_map(snap.holder).pop(snap.tail, None)
        self.counters["prefix_snapshots_evicted"] += 1

    def flush(self) -> None:
        """Write every snapshot still in memory to the disk tier (at shutdown: the next run resumes from
        them), and wait for the writes."""
        if self.spill is None or self.export_mla is None:
            return
        for snap in list(self._lru):
            self.spill.put(self._whole(snap))
        self.spill.wait()

    def _whole(self, snap: Snapshot) -> SequenceState:
        chain = chain_of(snap.holder)
        mla = self.export_mla([e.block for e in chain], snap.holder.end if snap.holder else 0)
        if snap.tail:
            mla = {i: torch.cat((rows, snap.tail_rows[i].to(rows.device))) for i, rows in mla.items()}
        tokens = [t for e in chain for t in e.tokens] + list(snap.tail)
        return SequenceState(tokens, [], snap.kda, mla)

    def stats(self) -> dict:
        out = dict(self.counters, prefix_cache_snapshots=len(self._lru), prefix_cache_snapshot_bytes=self.nbytes,
                   prefix_cache_memory=self.budget_bytes)
        if self.spill is not None:
            out |= self.spill.stats()
        return out
