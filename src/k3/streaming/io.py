"""Positioned reads of one expert into one slot: O_DIRECT (aligned superset of the expert's bytes)
where the file system allows it, buffered `preadv` otherwise. File descriptors are opened once."""

from __future__ import annotations

import mmap
import os
import threading
from pathlib import Path

from k3.checkpoint.errors import CheckpointError
from k3.checkpoint.paths import member_path
from k3.streaming.extents import ExpertExtent

O_DIRECT = getattr(os, "O_DIRECT", 0)


def pread_exact(fd: int, view: memoryview, offset: int, file: str, allow_short_at_eof: int | None = None) -> int:
    """Fill `view` from `offset`; a short read is an error unless at least `allow_short_at_eof` bytes came."""
    done = 0
    while done < len(view):
        n = os.preadv(fd, [view[done:]], offset + done)
        if n <= 0:
            if allow_short_at_eof is not None and done >= allow_short_at_eof:
                return done
            raise CheckpointError("shard ends before the data its header promises; re-download it", file=file)
        done += n
    return done


def open_for_reads(path: Path, want_direct: bool, align: int, probe_at: int) -> tuple[int, bool]:
    """(fd, whether it reads with O_DIRECT): O_DIRECT when wanted and a probe read at `probe_at` works."""
    if want_direct and O_DIRECT:
        try:
            fd = os.open(path, os.O_RDONLY | O_DIRECT)
        except OSError:
            fd = None
        if fd is not None:
            try:
                with mmap.mmap(-1, align) as probe:  # private aligned buffer: slots may be in use
                    os.preadv(fd, [probe], probe_at // align * align)
                return fd, True
            except OSError:  # tmpfs and some others refuse O_DIRECT (EINVAL)
                os.close(fd)
    return os.open(path, os.O_RDONLY), False


class SlotReader:
    def __init__(self, root: Path, arena: memoryview, direct_io: bool, align: int):
        self.root, self.arena, self.align = root, arena, align
        self.want_direct = direct_io and bool(O_DIRECT)
        self.direct_reads = False
        self._fds: dict[str, tuple[int, bool]] = {}
        self._lock = threading.Lock()

    def _fd(self, file: str, probe_at: int) -> tuple[int, bool]:
        with self._lock:
            if file not in self._fds:
                path = member_path(self.root, file)
                self._fds[file] = self._open(path, probe_at)
            return self._fds[file]

    def _open(self, path: Path, probe_at: int) -> tuple[int, bool]:
        return open_for_reads(path, self.want_direct, self.align, probe_at)

    def read(self, extent: ExpertExtent, base: int) -> dict[str, tuple[int, int, tuple[int, ...]]]:
        """Read `extent` into the arena at `base`; -> {role: (offset from base, nbytes, shape)}."""
        first = extent.parts[0]
        if extent.contiguous:
            fd, direct = self._fd(first.file, first.offset)
            if direct:
                start = first.offset // self.align * self.align
                end = first.offset + extent.nbytes
                length = -(-(end - start) // self.align) * self.align
                pread_exact(fd, self.arena[base: base + length], start, first.file, allow_short_at_eof=end - start)
                self.direct_reads = True
                shift = first.offset - start
            else:
                pread_exact(fd, self.arena[base: base + extent.nbytes], first.offset, first.file)
                shift = 0
            return {p.role: (shift + p.offset - first.offset, p.nbytes, p.shape) for p in extent.parts}
        layout, pos = {}, 0
        for p in extent.parts:
            fd = self._fd(p.file, p.offset)[0]
            if self._fds[p.file][1]:  # direct fd: reopen buffered for unaligned per-part reads
                fd = self._buffered(p.file)
            pread_exact(fd, self.arena[base + pos: base + pos + p.nbytes], p.offset, p.file)
            layout[p.role] = (pos, p.nbytes, p.shape)
            pos += p.nbytes
        return layout

    def _buffered(self, file: str) -> int:
        with self._lock:
            key = file + "\0buffered"
            if key not in self._fds:
                self._fds[key] = (os.open(member_path(self.root, file), os.O_RDONLY), False)
            return self._fds[key][0]

    def close(self) -> None:
        for fd, _ in self._fds.values():
            os.close(fd)
        self._fds.clear()
