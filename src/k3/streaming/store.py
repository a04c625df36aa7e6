"""The expert store: a fixed pool of expert-sized slots filled by positioned reads from the shards.

`schedule(layer, experts)` yields each requested expert's tensors in the order asked (so results
are bit-identical to a resident run), while reads of the experts after it are already in flight
on a thread pool, as many as there are free slots, submitted in on-disk order. Slots not in use
form an LRU cache across steps. Each expert is read once per step whatever the number of tokens
routed to it. Reads use O_DIRECT into page-aligned slots where the file system allows, buffered
positioned reads otherwise. Only the compute thread touches the slot tables; reader threads fill
slot memory and report timings.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict, deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch

from k3.checkpoint.errors import CheckpointError
from k3.streaming.extents import ExpertExtent
from k3.streaming.io import SlotReader
from k3.streaming.stats import StoreStats
from k3.ops import huge_pages

Key = tuple[int, int]  # (layer, expert)
ALIGN = 4096


class ExpertStore:
    def __init__(self, root: str | Path, extents: dict[Key, ExpertExtent], slots: int, *, io_threads: int = 4,
                 direct_io: bool = True):
        if slots < 1:
            raise ValueError("the expert store needs at least one slot")
        self.extents = extents
        largest = max(x.nbytes for x in extents.values())
        self.stride = -(-(largest + 2 * ALIGN) // ALIGN) * ALIGN
        self.num_slots = slots
        self._arena = huge_pages.anonymous(slots * self.stride)  # page-aligned, reused for the store's lifetime
        self.buffer = torch.frombuffer(self._arena, dtype=torch.uint8)
        self.reader = SlotReader(Path(root), memoryview(self._arena), direct_io, ALIGN)
        self.stats = StoreStats(slots=slots, slot_bytes=self.stride)
        self._pool = ThreadPoolExecutor(max_workers=io_threads, thread_name_prefix="k3-expert-read")
        self._slot_of: dict[Key, int] = {}
        self._free: list[int] = list(range(slots - 1, -1, -1))
        self._lru: OrderedDict[Key, None] = OrderedDict()  # resident, unpinned; oldest first
        self._ready: dict[Key, Future] = {}
        self._lock = threading.Lock()

    def schedule(self, layer: int, experts: list[int]) -> Iterator[tuple[int, dict[str, torch.Tensor]]]:
        """Yield (expert, {role: uint8 view}) for `experts` in order; a view is valid until the next yield."""
        queue, window = deque(experts), deque()
        try:
            while queue or window:
                batch = []
                while queue and (self._free or self._lru):
                    key = (layer, queue.popleft())
                    self._acquire(key, batch)
                    window.append(key)
                self._submit(batch)
                key = window.popleft()
                views = self._wait(key)
                yield key[1], views
                self._release(key)
        finally:
            for key in window:
                self._release(key)

    def _acquire(self, key: Key, batch: list[Key]) -> None:
        if key in self._slot_of:
            self._lru.pop(key, None)
            self.stats.hits += 1
            return
        if self._free:
            slot = self._free.pop()
        else:
            old, _ = self._lru.popitem(last=False)
            slot = self._slot_of.pop(old)
            self._ready.pop(old, None)
        self._slot_of[key] = slot
        self.stats.misses += 1
        batch.append(key)

    def _submit(self, batch: list[Key]) -> None:
        for key in sorted(batch, key=lambda k: self.extents[k].sort_key):
            self._ready[key] = self._pool.submit(self._read, key, self._slot_of[key])

    def _read(self, key: Key, slot: int) -> dict[str, tuple[int, int, tuple[int, ...]]]:
        t0 = time.perf_counter()
        layout = self.reader.read(self.extents[key], slot * self.stride)
        for role, (offset, nbytes, _) in layout.items():
            if role.endswith("_scale"):
                start = slot * self.stride + offset
                if np.frombuffer(self._arena, np.uint8, nbytes, start).max(initial=0) == 255:
                    raise CheckpointError(f"E8M0 scale byte 255 (NaN) in expert {key[1]} {role} of layer {key[0]}; "
                                          "the shard is corrupt - run `k3 verify` and re-download it")
        with self._lock:
            self.stats.add_read(self.extents[key].nbytes, time.perf_counter() - t0, self.reader.direct_reads)
        return layout

    def _wait(self, key: Key) -> dict[str, torch.Tensor]:
        t0 = time.perf_counter()
        try:
            layout = self._ready[key].result()
        except BaseException:
            self._forget(key)
            raise
        self.stats.wait_seconds += time.perf_counter() - t0
        base = self._slot_of[key] * self.stride
        return {role: self.buffer[base + off: base + off + n].view(shape) for role, (off, n, shape) in layout.items()}

    def _release(self, key: Key) -> None:
        if key in self._slot_of:
            self._lru[key] = None

    def _forget(self, key: Key) -> None:
        slot = self._slot_of.pop(key, None)
        self._ready.pop(key, None)
        self._lru.pop(key, None)
        if slot is not None:
            self._free.append(slot)

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        self.reader.close()
