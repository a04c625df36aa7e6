"""A memory cgroup around one sandboxed run, where this machine lets the harness make one.

RLIMIT_AS bounds what each process maps; a cgroup bounds everything the run's processes are charged for
together: anonymous memory, the workspace's tmpfs pages they write, pipe and socket buffers, page cache.
seccomp already refuses the known ways around RLIMIT_AS (memfds, fd passing, SysV shm), so this is a
second layer, used when a writable memory controller is found: cgroup v2 (a delegated subtree with
`memory.max`) or v1 (`memory.limit_in_bytes`), below the harness's own cgroup. Without one (an
unprivileged user with no delegation) the run goes on without it, and the report says which layers
held. The run's first process joins the cgroup before it execs anything (a `sh` wrapper writes its own
PID to `cgroup.procs`), so nothing it starts is ever outside."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
from pathlib import Path

from k3.config import env

ROOT = Path("/sys/fs/cgroup")
_counter = itertools.count()


def _own(controller: str | None) -> Path | None:
    """This process's cgroup directory for `controller` (v1) or the unified one (None, v2)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, names, path = line.split(":", 2)
        if (controller is None and names == "") or (controller is not None and controller in names.split(",")):
            base = ROOT if controller is None and (ROOT / "cgroup.controllers").exists() else \
                (ROOT / "unified" if controller is None else ROOT / controller)
            return base / path.lstrip("/")
    return None


class MemoryCgroup:
    """A child cgroup with a memory limit; `wrap(argv)` starts argv inside it; `close()` removes it."""

    def __init__(self, path: Path, limit_file: str, limit_bytes: int):
        self.path, self.limit_bytes = path, limit_bytes
        (path / limit_file).write_text(str(limit_bytes))
        if limit_file == "memory.limit_in_bytes" and (path / "memory.memsw.limit_in_bytes").exists():
            try:
                (path / "memory.memsw.limit_in_bytes").write_text(str(limit_bytes))   # no escape to swap
            except OSError:
                pass

    @classmethod
    def make(cls, limit_bytes: int) -> "MemoryCgroup | None":
        """A new cgroup below ours with the limit, or None where none can be had (nothing is left behind)."""
        if not env.switch("K3_SANDBOX_CGROUP", True):
            return None
        name = f"k3-sandbox-{os.getpid()}-{next(_counter)}"
        for controller, limit_file in ((None, "memory.max"), ("memory", "memory.limit_in_bytes")):
            parent = _own(controller)
            if parent is None or not (parent / "cgroup.procs").exists():
                continue
            if controller is None and "memory" not in _read(parent / "cgroup.subtree_control").split():
                continue
            path = parent / name
            try:
                path.mkdir()
            except OSError:
                continue
            try:
                group = cls(path, limit_file, limit_bytes)
            except OSError:
                _rmdir(path)
                continue
            if group.joinable():
                return group
            group.close()
        return None

    def joinable(self) -> bool:
        """Whether a process can join (cgroup v2 refuses some placements that mkdir allowed)."""
        try:
            return subprocess.run(self.wrap(["true"]), capture_output=True, timeout=10).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            return False

    def wrap(self, argv: list[str]) -> list[str]:
        """argv started inside this cgroup: a shell joins it, then execs argv."""
        return ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', str(self.path / "cgroup.procs"), *argv]

    @property
    def layer(self) -> str:
        return f"cgroup-memory-{self.limit_bytes >> 20}MiB"

    def kill(self) -> None:
        """SIGKILL every process in the cgroup: at once through `cgroup.kill` (v2, Linux 5.14+), else one by one."""
        try:
            (self.path / "cgroup.kill").write_text("1")
            return
        except OSError:
            pass
        for pid in self.pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass

    def pids(self) -> list[int]:
        return [int(p) for p in _read(self.path / "cgroup.procs").split()]

    def close(self) -> None:
        _rmdir(self.path)


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _rmdir(path: Path) -> None:
    try:
        path.rmdir()
    except OSError:
        pass
