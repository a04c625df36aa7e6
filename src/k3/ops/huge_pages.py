"""Weight memory on 2 MB pages (Linux transparent huge pages), for tensors that are read every token.

A decode token streams every active weight once. On 4 KB pages that is one TLB entry per 4 KB: the
764 MB of `compare.py`'s checkpoint walk some 190,000 pages a token, and the walks, plus the TLB
misses of the interpreter's and the kernels' own data after the stream has evicted their entries,
cost measurably (docs/design/kernels.md).

`empty(shape, dtype)` gives an uninitialised CPU tensor whose bytes start on a 2 MB boundary of an
anonymous mapping advised MADV_HUGEPAGE before anything touches it, so the page faults of the first
write take huge pages where the kernel has them (and 4 KB pages, silently, where it has not). Small
tensors, other systems, transparent huge pages set to `never`, and K3_HUGE_PAGES=0 get `torch.empty`.
The results do not depend on it.
"""

from __future__ import annotations

import mmap
from pathlib import Path

import torch

from k3.config import env
from k3.config.once import once

HUGE_PAGE = 2 << 20
THP_SETTING = Path("/sys/kernel/mm/transparent_hugepage/enabled")


@once
def available() -> bool:
    """Whether weights go on huge pages: Linux with transparent huge pages on (`always` or `madvise`),
    and K3_HUGE_PAGES not 0."""
    if not env.switch("K3_HUGE_PAGES", True) or not hasattr(mmap, "MADV_HUGEPAGE"):
        return False
    try:
        setting = THP_SETTING.read_text()
    except OSError:
        return False
    return "[never]" not in setting


def worth_it(nbytes: int) -> bool:
    """Whether a tensor of nbytes goes on huge pages: at least one whole huge page, and available."""
    return nbytes >= HUGE_PAGE and available()


def empty(shape, dtype: torch.dtype, device: torch.device | str = "cpu") -> torch.Tensor:
    """torch.empty(shape, dtype=dtype, device=device), on 2 MB pages where `worth_it` (CPU only)."""
    nbytes = torch.Size(shape).numel() * torch.empty((), dtype=dtype).element_size()
    if torch.device(device).type != "cpu" or not worth_it(nbytes):
        return torch.empty(shape, dtype=dtype, device=device)
    # Anonymous and private (shared memory is shmem, which transparent huge pages treat apart), page
    # aligned, with a huge page of slack to start on a huge-page boundary; the slack is never touched.
    try:
        region = mmap.mmap(-1, nbytes + HUGE_PAGE, flags=mmap.MAP_PRIVATE)
    except OSError:   # a mapping limit (vm.max_map_count, an address-space cap): plain memory still may fit
        return torch.empty(shape, dtype=dtype, device=device)
    raw = torch.frombuffer(region, dtype=torch.uint8)   # keeps `region` alive as long as any view of it
    start = -raw.data_ptr() % HUGE_PAGE
    # Whole huge pages only: a last partial one stays on 4 KB pages rather than commit up to 2 MB unused.
    whole = nbytes // HUGE_PAGE * HUGE_PAGE
    if whole:
        region.madvise(mmap.MADV_HUGEPAGE, start, whole)
    return raw[start:start + nbytes].view(dtype).view(shape)


def anonymous(nbytes: int) -> mmap.mmap:
    """A private anonymous mapping of nbytes (page aligned, zero on first touch) for weights read into
    it as they are needed (the expert store's slots, the streamed trunk's arenas), advised onto huge
    pages where `available`: the kernel backs its 2 MB-aligned stretches with them. Python's mmap
    default would be shared memory, which transparent huge pages treat apart (shmem)."""
    if not hasattr(mmap, "MAP_PRIVATE"):   # not a POSIX system: its plain anonymous mapping
        return mmap.mmap(-1, nbytes)
    region = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE)
    if nbytes >= HUGE_PAGE and available():
        region.madvise(mmap.MADV_HUGEPAGE)
    return region


def copy_of(t: torch.Tensor) -> torch.Tensor:
    """A contiguous copy of CPU tensor t on huge pages (t itself where `worth_it` says no)."""
    if t.device.type != "cpu" or not worth_it(t.numel() * t.element_size()):
        return t
    out = empty(t.shape, t.dtype)
    out.copy_(t)
    return out
