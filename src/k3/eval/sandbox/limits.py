"""Resource limits of one sandboxed run."""

from __future__ import annotations

from dataclasses import asdict, dataclass


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
