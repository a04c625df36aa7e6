"""Resource limits of one sandboxed run."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass(frozen=True)
class Limits:
    wall_s: float = 20.0              # killed (with its whole process group) after this
    cpu_s: int = 10                   # RLIMIT_CPU
    memory_bytes: int = 1 << 30       # RLIMIT_AS
    output_bytes: int = 64 * 1024     # stdout + stderr kept; more kills the run
    file_bytes: int = 16 << 20        # RLIMIT_FSIZE: the largest file it may write
    processes: int = 32               # RLIMIT_NPROC for the sandbox's own user
    open_files: int = 64              # RLIMIT_NOFILE
    workspace_bytes: int = 256 << 20  # the workspace tmpfs: everything it may write, in all files together

    def to_dict(self) -> dict:
        return asdict(self)


def nproc_limit(processes: int) -> int:
    """RLIMIT_NPROC for a run of `processes`: the limit counts every process of the user, so leave room for
    those already running."""
    uid = os.getuid()
    mine = sum(1 for p in Path("/proc").iterdir() if p.name.isdigit() and _owner(p) == uid)
    return mine + processes


def _owner(proc_dir: Path) -> int | None:
    try:
        return proc_dir.stat().st_uid
    except OSError:
        return None
