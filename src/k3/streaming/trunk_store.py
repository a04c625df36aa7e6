"""Streamed trunk layers: their large matrices live in a few page-aligned arenas and are read from the
original shards just before the layer runs, the next streamed layer's read in flight meanwhile.

Layer order is known in advance (unlike experts), so no cache is needed: streamed layer r uses arena
r % A, and when it finishes, the read of the streamed layer that uses that arena next starts (rank
r + A, or after the last ones, rank r % A for the following token). Each tensor has a fixed place in
its arena, so the module parameters are views bound once (nothing is re-pointed per token) and the
model computes exactly what the resident one does. A tensor sits at the same offset within a page as in its file, so O_DIRECT
reads land in place; where O_DIRECT is refused (tmpfs) reads are buffered and the page cache is told
to drop what was read. Correctness never depends on the order: `ready(layer)` reads the layer itself
when its bytes are not there (an aborted step, a layer called out of turn).
"""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import torch

from k3.checkpoint.paths import member_path
from k3.checkpoint.reader import TRUNK_DTYPES
from k3.streaming.io import open_for_reads, pread_exact
from k3.streaming.trunk import PAGE, TrunkPart, region_bytes
from k3.ops import huge_pages

CHUNK = 8 << 20  # bytes per positioned read: enough in flight to keep an NVMe queue busy


@dataclass
class TrunkStats:
    arenas: int
    arena_bytes: int
    layer_reads: int = 0
    bytes_read: int = 0
    read_seconds: float = 0.0  # summed over reader threads
    wait_seconds: float = 0.0  # compute blocked on a layer's read
    direct_io: bool = False

    def to_dict(self) -> dict:
        return {"trunk_arenas": self.arenas, "trunk_arena_bytes": self.arena_bytes, "trunk_layer_reads": self.layer_reads,
                "trunk_bytes_read": self.bytes_read, "trunk_read_seconds": self.read_seconds,
                "trunk_wait_seconds": self.wait_seconds, "trunk_direct_io": self.direct_io}


class TrunkStore:
    def __init__(self, root: str | Path, extents: dict[int, list[TrunkPart]], *, arenas: int = 2, io_threads: int = 4,
                 direct_io: bool = True):
        self.root, self.order = Path(root), sorted(extents)
        self.rank = {layer: r for r, layer in enumerate(self.order)}
        self.layouts = {layer: _layout(parts) for layer, parts in extents.items()}
        self.num_arenas = max(1, min(arenas, len(self.order)))
        size = max((end for _, end in self.layouts.values()), default=PAGE)
        self._arenas = [huge_pages.anonymous(size) for _ in range(self.num_arenas)]
        buffers = [torch.frombuffer(a, dtype=torch.uint8) for a in self._arenas]
        self.tensors = {layer: {p.name: _view(buffers[self._arena(layer)], p, start) for p, start in places}
                        for layer, (places, _) in self.layouts.items()}
        self.stats = TrunkStats(self.num_arenas, size)
        self._occupant: list[int | None] = [None] * self.num_arenas
        self._pending: list[tuple[int, list[Future]] | None] = [None] * self.num_arenas
        self._pool = ThreadPoolExecutor(max_workers=io_threads, thread_name_prefix="k3-trunk-read")
        self._want_direct, self._fds, self._lock = direct_io, {}, threading.Lock()

    def _arena(self, layer: int) -> int:
        return self.rank[layer] % self.num_arenas

    def ready(self, layer: int) -> None:
        """Before `layer` runs: its bytes are in its arena (waits for the read in flight, or reads now)."""
        a = self._arena(layer)
        t0 = time.perf_counter()
        pending, self._pending[a] = self._pending[a], None
        try:
            if pending is not None:
                _wait(pending[1])
                self._occupant[a] = pending[0]
            if self._occupant[a] != layer:
                self._occupant[a] = None
                _wait(self._submit(layer, a))
                self._occupant[a] = layer
        except BaseException:
            self._occupant[a] = None
            raise
        finally:
            self.stats.wait_seconds += time.perf_counter() - t0

    def done(self, layer: int) -> None:
        """After `layer` ran: start reading the streamed layer that uses its arena next."""
        if len(self.order) <= self.num_arenas:
            return  # every streamed layer has an arena of its own: read once, then kept
        a, r = self._arena(layer), self.rank[layer]
        # The arena's next user: A ranks on, or (wrapping to the next token) the first rank that uses it.
        following = self.order[r + self.num_arenas if r + self.num_arenas < len(self.order) else a]
        if self._pending[a] is not None:  # only when called out of turn: never two reads into one arena
            _wait(self._pending[a][1])
        self._occupant[a] = None
        self._pending[a] = (following, self._submit(following, a))

    def _submit(self, layer: int, arena: int) -> list[Future]:
        self.stats.layer_reads += 1
        buf = memoryview(self._arenas[arena])
        return [self._pool.submit(self._read, buf, part, start, lo, hi)
                for part, start in self.layouts[layer][0] for lo, hi in _chunks(part.nbytes + start % PAGE)]

    def _read(self, buf: memoryview, part: TrunkPart, start: int, lo: int, hi: int) -> None:
        """Bytes [lo, hi) of the part's page-aligned span (its data begins start % PAGE into it)."""
        t0 = time.perf_counter()
        shift = start % PAGE
        fd, direct = self._fd(part.file, part.offset, buffered=part.offset % PAGE != shift)
        if direct:
            first = part.offset - shift
            end = shift + part.nbytes  # the data's end inside the span: a short read past it is the file's end
            pread_exact(fd, buf[start - shift + lo: start - shift + hi], first + lo, part.file,
                        allow_short_at_eof=max(0, min(hi, end) - lo))
        else:
            lo, hi = max(lo - shift, 0), min(hi - shift, part.nbytes)
            if hi > lo:
                pread_exact(fd, buf[start + lo: start + hi], part.offset + lo, part.file)
                os.posix_fadvise(fd, part.offset + lo, hi - lo, os.POSIX_FADV_DONTNEED)
        with self._lock:
            self.stats.bytes_read += hi - lo
            self.stats.read_seconds += time.perf_counter() - t0
            self.stats.direct_io = self.stats.direct_io or direct

    def _fd(self, file: str, probe_at: int, buffered: bool) -> tuple[int, bool]:
        """The file opened once for O_DIRECT where allowed (or once buffered, for a part placed off its
        file alignment)."""
        key = (file, buffered)
        with self._lock:
            if key not in self._fds:
                self._fds[key] = open_for_reads(member_path(self.root, file), self._want_direct and not buffered, PAGE,
                                                probe_at)
            return self._fds[key]

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        for fd, _ in self._fds.values():
            os.close(fd)
        self._fds.clear()


def _layout(parts: list[TrunkPart]) -> tuple[list[tuple[TrunkPart, int]], int]:
    """([(part, byte offset of its data in the arena)], arena bytes used): each part in its own pages,
    at its file offset's place within a page when its dtype allows (else page-aligned, read buffered)."""
    places, pos = [], 0
    for p in parts:
        shift = p.offset % PAGE
        if shift % TRUNK_DTYPES[p.dtype].itemsize:
            shift = 0
        places.append((p, pos + shift))
        pos += region_bytes(p.nbytes)
    return places, pos


def _view(buffer: torch.Tensor, part: TrunkPart, start: int) -> torch.Tensor:
    return buffer[start: start + part.nbytes].view(TRUNK_DTYPES[part.dtype]).view(part.shape)


def _chunks(span: int) -> list[tuple[int, int]]:
    """[lo, hi) pieces of a span of `span` bytes, CHUNK each (page multiples), the last rounded up to a page."""
    end = -(-span // PAGE) * PAGE
    return [(lo, min(lo + CHUNK, end)) for lo in range(0, end, CHUNK)]


def _wait(futures: list[Future]) -> None:
    for f in futures:
        f.result()
