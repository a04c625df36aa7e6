"""This machine's memory, free disk and measured read bandwidths (for `k3 doctor` and plans).

Disk bandwidth is measured on a real file with its page cache dropped first (posix_fadvise
DONTNEED), so it reads the drive rather than RAM; where the cache cannot be dropped the figure is
flagged as possibly cached. Memory bandwidth is a large numpy copy (decode's practical floor).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

READ_BLOCK = 8 * 2 ** 20


@dataclass(frozen=True)
class MachineInfo:
    cpus: int
    mem_total: int
    mem_available: int
    disk_free: int
    disk_path: str
    disk_read_bytes_per_s: float
    disk_read_cold: bool
    mem_bytes_per_s: float

    def to_dict(self) -> dict:
        return asdict(self)


def memory() -> tuple[int, int]:
    """(total, available) bytes from /proc/meminfo, falling back to sysconf."""
    try:
        fields = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
        kib = lambda k: int(fields[k].split()[0]) * 1024  # noqa: E731
        return kib("MemTotal"), kib("MemAvailable")
    except (OSError, KeyError, ValueError):
        page = os.sysconf("SC_PAGE_SIZE")
        return os.sysconf("SC_PHYS_PAGES") * page, os.sysconf("SC_AVPHYS_PAGES") * page


def measure_read(path: Path, limit: int) -> tuple[float, bool]:
    """(bytes/s, cold) reading up to `limit` bytes of `path` after dropping its cached pages."""
    fd = os.open(path, os.O_RDONLY)
    try:
        cold = hasattr(os, "posix_fadvise")
        if cold:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        done, t0 = 0, time.perf_counter()
        while done < limit:
            block = os.pread(fd, min(READ_BLOCK, limit - done), done)
            if not block:
                break
            done += len(block)
        return done / max(time.perf_counter() - t0, 1e-9), cold
    finally:
        os.close(fd)


def measure_disk(where: Path, sample: Path | None, limit: int = 512 * 2 ** 20) -> tuple[float, bool]:
    """Read bandwidth of the drive holding `where`: from `sample` (a large existing file) if given,
    otherwise from a temporary file written there, flushed and read back."""
    if sample is not None:
        return measure_read(sample, limit)
    size = min(limit, 64 * 2 ** 20)
    with tempfile.NamedTemporaryFile(dir=where, prefix=".k3-bandwidth-") as f:
        block = os.urandom(2 ** 20) * 8
        for _ in range(size // len(block)):
            f.write(block)
        f.flush()
        os.fsync(f.fileno())
        return measure_read(Path(f.name), size)


def measure_memory(nbytes: int = 256 * 2 ** 20, repeats: int = 3) -> float:
    """Copy bandwidth (bytes read + written per second) of a large buffer, best of `repeats`."""
    src = np.ones(nbytes // 8)
    dst = np.empty_like(src)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t0)
    return 2 * nbytes / best


def machine_info(disk_path: str | Path, sample: Path | None = None, measure: bool = True) -> MachineInfo:
    total, available = memory()
    where = Path(disk_path)
    free = shutil.disk_usage(where).free
    disk_bw, cold = measure_disk(where, sample) if measure else (0.0, False)
    return MachineInfo(os.cpu_count() or 1, total, available, free, str(where), disk_bw, cold,
                       measure_memory() if measure else 0.0)


def torch_facts() -> dict:
    """torch's version and, where there is one, the GPU's name: what a result ran on beside the CPU."""
    try:
        import torch
    except ImportError:
        return {}
    out = {"torch": torch.__version__}
    if torch.cuda.is_available():
        out["gpu"] = torch.cuda.get_device_name(0)
    return out
