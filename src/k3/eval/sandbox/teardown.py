"""Ending a run: `run_python` returns only once every process of the sandbox is gone.

Under isolation "namespaces" the processes that matter are not the harness's children: bubblewrap's
outer process forks the PID namespace's init, which forks the launcher. Killing and reaping the outer
process leaves init to die later from its parent-death signal, and the sandboxed code kept running
for a fraction of a second after `run_python` returned (enough to swap a workspace directory for a
link under the next file tool). So bubblewrap reports init's PID (`--info-fd`), the harness holds a
pidfd on it, and the end of a run kills init through that pidfd and waits for the pidfd to signal
its exit. The kernel tears a PID namespace down inside its init's exit (every other process is
killed and reaped before init's exit is reported), so that wait covers them all.

Under isolation "process" the child is the harness's own and may not fork (seccomp), so killing its
process group and reaping it is enough."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import time

INFO_WAIT_S = 10.0   # bubblewrap writes its info once the namespaces exist; a slow start is not a failure
EXIT_WAIT_S = 10.0


class SandboxTeardownError(RuntimeError):
    """The sandbox's processes could not be confirmed gone: the harness must not touch the workspace."""


def read_info(info_r: int, proc: subprocess.Popen) -> dict:
    """bubblewrap's JSON info (`child-pid`: the namespace's init, in our PID namespace), or {} when bubblewrap
    exited before writing it."""
    chunks, deadline = [], time.monotonic() + INFO_WAIT_S
    while time.monotonic() < deadline:
        ready, _, _ = select.select([info_r], [], [], 0.05)
        if ready:
            chunk = os.read(info_r, 4096)
            if not chunk:
                break
            chunks.append(chunk)
            try:
                return json.loads(b"".join(chunks))
            except ValueError:
                continue
        elif proc.poll() is not None:
            break
    try:
        return json.loads(b"".join(chunks)) if chunks else {}
    except ValueError:
        return {}


class NamespaceInit:
    """A pidfd on the PID namespace's init, checked to be a process in another PID namespace than ours."""

    def __init__(self, pid: int | None):
        self.fd = None
        if not pid:
            return
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            return   # already gone, and with it the namespace
        try:
            if os.readlink(f"/proc/{pid}/ns/pid") == os.readlink("/proc/self/ns/pid"):
                os.close(fd)   # the PID was reused by a process of ours: never signal it
                return
        except OSError:
            pass   # gone between the two calls: the pidfd reports that below
        self.fd = fd

    def end(self, wait_s: float = EXIT_WAIT_S) -> bool:
        """Kill init (and so the namespace) -> whether its exit was reported within `wait_s`."""
        if self.fd is None:
            return True
        try:
            signal.pidfd_send_signal(self.fd, signal.SIGKILL)
        except ProcessLookupError:
            pass
        poller = select.poll()
        poller.register(self.fd, select.POLLIN)
        exited = bool(poller.poll(int(wait_s * 1000)))
        if exited:
            os.close(self.fd)
            self.fd = None
        return exited


def end_run(proc: subprocess.Popen, init: NamespaceInit | None, cgroup=None) -> None:
    """Every process of the run gone, the outer process reaped, its pipes closed; else SandboxTeardownError.

    The namespace's init is killed first; when its end is not reported in time (a fork bomb on a loaded
    machine), every process in the run's cgroup is killed too and the cgroup must empty, since the run's
    first process joined it before anything else started. The caller treats the error as final: the
    sandbox is not used again (run.py)."""
    try:
        if init is not None and not init.end() and not _emptied(cgroup) and not init.end(EXIT_WAIT_S):
            raise SandboxTeardownError(f"the sandbox's processes did not end within {2 * EXIT_WAIT_S:.0f} s of "
                                       "SIGKILL; the sandbox is closed and its workspace no longer touched")
    finally:
        if init is not None and init.fd is not None:
            os.close(init.fd)
            init.fd = None
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait()
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None and not stream.closed:
                stream.close()


def _emptied(cgroup) -> bool:
    """Kill everything in the run's cgroup -> whether it emptied within EXIT_WAIT_S (False without one)."""
    if cgroup is None:
        return False
    cgroup.kill()
    deadline = time.monotonic() + EXIT_WAIT_S
    while cgroup.pids():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True
