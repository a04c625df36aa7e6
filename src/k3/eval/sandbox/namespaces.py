"""Isolation "namespaces": every run in fresh user, PID, mount, IPC, UTS and network namespaces made by
Debian's bubblewrap, seeing only a read-only interpreter and a size-capped tmpfs workspace.

The workspace must outlive each run (the agent's file tools read it between runs) and must be capped
in total size, which a per-file rlimit is not. So a small holder process (`unshare --user
--map-root-user --mount`) mounts a tmpfs of `workspace_bytes` over the workspace directory inside its
own mount namespace and waits on a pipe. Runs enter that namespace (`nsenter`) and start bubblewrap
there, which binds the tmpfs as /workspace. The harness reaches the same files through
/proc/HOLDER/root. Closing the pipe, or the harness dying, ends the holder and frees the tmpfs with
it: nothing is left mounted anywhere. Unprivileged: needs only user namespaces, bwrap, unshare and
nsenter (util-linux)."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from pathlib import Path

from k3.eval.sandbox import hidden

MOUNT_POINT = "/workspace"         # where the child sees its workspace
CONTROL_POINT = "/k3/run"          # this run's script, config and check files, read-only
LAUNCHER_POINT = "/k3/sandbox"     # the launcher and its sibling modules, read-only
SUITE_POINT = "/k3/judge"          # a judged run's test suite, read-only, readable by the judge process alone
NAMESPACES = ("user", "pid", "mnt", "ipc", "uts", "net")   # launcher.py keeps its own copy (it imports no k3)
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
INSTALL_HINT = ("install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap) and allow unprivileged user "
                "namespaces (sysctl kernel.unprivileged_userns_clone=1)")


class SandboxUnavailable(RuntimeError):
    """The default isolation cannot be had here; the message says what to install or which flag lowers it."""


def missing() -> str | None:
    """Why isolation "namespaces" cannot run here, or None when it can."""
    for tool in ("bwrap", "unshare", "nsenter"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    if sys.platform != "linux":
        return "bubblewrap needs Linux"
    return None


def require() -> None:
    """Raise SandboxUnavailable, saying what to install and which flag lowers the isolation, when
    isolation "namespaces" cannot run here."""
    why = missing()
    if why is not None:
        raise SandboxUnavailable(f"the sandbox's default isolation cannot run here: {why}. To fix: {INSTALL_HINT}. "
                                 "Code of your own can accept less isolation: Sandbox(isolation='process').")


@functools.cache
def harness_links() -> dict[str, str]:
    """The harness's own namespaces, for the child to check which of its own differ."""
    links = {}
    for ns in NAMESPACES:
        try:
            links[ns] = os.readlink(f"/proc/self/ns/{ns}")
        except OSError:
            pass
    return links


def interpreter_dirs() -> list[str]:
    """What the child needs to run this Python: its installation and, for a venv, the venv."""
    dirs = []
    for d in (sys.base_prefix, sys.prefix, os.path.dirname(os.path.realpath(sys.executable))):
        real = os.path.realpath(d)
        if not any(real == s or real.startswith(s + "/") for s in dirs + ["/usr"]):
            dirs.append(real)
    return dirs


class WorkspaceMount:
    """A tmpfs of `cap_bytes` at `directory`, visible to runs (`target_pid`) and to us (`path`)."""

    def __init__(self, directory: Path, cap_bytes: int, inodes: int = 16384):
        script = 'mount -t tmpfs -o "size=$1,nr_inodes=$2,mode=0700" k3-workspace "$0" && echo ready && exec cat >/dev/null'
        self.holder = subprocess.Popen(["unshare", "--user", "--map-root-user", "--mount", "--", "sh", "-c", script,
                                        str(directory), str(cap_bytes), str(inodes)],
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        line = self.holder.stdout.readline()
        if line.strip() != b"ready":
            err = self.holder.stderr.read().decode(errors="replace").strip()
            self.close()
            raise SandboxUnavailable(f"cannot make the sandbox's workspace tmpfs ({err or 'the holder exited'}): "
                                     f"{INSTALL_HINT}")
        self.target_pid = self.holder.pid
        self.path = Path(f"/proc/{self.holder.pid}/root{directory}")

    def close(self) -> None:
        if self.holder.poll() is None:
            self.holder.stdin.close()
            try:
                self.holder.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.holder.kill()
                self.holder.wait()
        for stream in (self.holder.stdin, self.holder.stdout, self.holder.stderr):
            if not stream.closed:
                stream.close()


def _system_binds() -> list[str]:
    args = []
    for d in SYSTEM_DIRS:
        if os.path.islink(d):
            args += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            args += ["--ro-bind", d, d]
    return args


def command(mount: WorkspaceMount, directory: Path, files: dict[str, str], launcher_dir: Path,
            info_fd: int) -> list[str]:
    """nsenter + bwrap argv for one run; `files` maps a host file to its read-only path inside; bubblewrap
    writes the PID of its namespace's init on `info_fd` (see teardown.py)."""
    argv = ["nsenter", f"--target={mount.target_pid}", "--user", "--mount", "--",
            "bwrap", "--unshare-all", "--die-with-parent", "--info-fd", str(info_fd), "--new-session", "--cap-drop", "ALL",
            "--uid", "1000", "--gid", "1000", "--hostname", "k3-sandbox", *_system_binds()]
    for d in interpreter_dirs():
        argv += ["--ro-bind", d, d]
    for d in hidden.within(interpreter_dirs()):   # hidden tests inside the interpreter's tree (hidden.py)
        argv += ["--tmpfs", d, "--remount-ro", d]
    argv += ["--proc", "/proc", "--dev", "/dev", "--remount-ro", "/dev",
             "--bind", str(directory), MOUNT_POINT, "--ro-bind", str(launcher_dir), LAUNCHER_POINT]
    for host, inside in files.items():
        argv += ["--ro-bind", host, inside]
    return argv + ["--chdir", MOUNT_POINT]


WEAK_WARNING = ("warning: the eval sandbox runs with isolation 'process' (no user, PID or mount namespaces, no "
                "total disk cap); install bubblewrap for the default isolation.")
_warned: list[bool] = []


def warn_weak() -> None:
    """The one warning that a run goes without namespaces (isolation "process")."""
    if not _warned:
        _warned.append(True)
        print(WEAK_WARNING, file=sys.stderr)
