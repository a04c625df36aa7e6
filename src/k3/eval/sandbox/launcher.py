"""Runs inside the sandbox child before the untrusted script: `python -I launcher.py CONFIG.json REPORT_FD`.

Self-contained (loads its sibling modules by path, never imports k3 or torch). In order: resource
limits; a new, empty network namespace when permitted; Landlock (writes only under the workspace, no
TCP); seccomp (no new processes, no exec); an audit hook as a last line (socket connects and binds,
writes outside the workspace, ctypes, process creation). Then it reports which layers took hold on
the fd given as argv[2] and runs the script as __main__ with the workspace as cwd.
"""

import ctypes
import importlib.util
import json
import os
import resource
import runpy
import sys

CLONE_NEWNET = 0x40000000
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


def _sibling(name):
    spec = importlib.util.spec_from_file_location(f"_k3_sandbox_{name}", os.path.join(os.path.dirname(__file__), f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _limit(kind, value):
    value = int(value)
    soft, hard = resource.getrlimit(kind)
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    resource.setrlimit(kind, (value, value))


def _apply_limits(lim, nproc):
    _limit(resource.RLIMIT_CPU, lim["cpu_s"])
    _limit(resource.RLIMIT_AS, lim["memory_bytes"])
    _limit(resource.RLIMIT_FSIZE, lim["file_bytes"])
    _limit(resource.RLIMIT_NOFILE, lim["open_files"])
    _limit(resource.RLIMIT_CORE, 0)
    _limit(resource.RLIMIT_NPROC, nproc)


def _inside(path, root):
    try:
        real = os.path.realpath(os.fsdecode(path))
    except (TypeError, ValueError):
        return False
    return real == root or real.startswith(root + os.sep) or real == "/dev/null"


def _audit_hook(root):
    blocked = ("socket.connect", "socket.bind", "socket.sendto", "ctypes.dlopen", "ctypes.dlsym",
               "os.fork", "os.forkpty", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "subprocess.Popen",
               "os.kill", "os.killpg")

    def hook(event, args):
        if event in blocked:
            raise PermissionError(f"sandbox: {event} is not allowed")
        if event == "open" and len(args) >= 3:
            path, mode, flags = args[0], args[1] or "", args[2] or 0
            writing = any(c in str(mode) for c in "wax+") or (isinstance(flags, int) and flags & WRITE_FLAGS)
            if writing and isinstance(path, (str, bytes, os.PathLike)) and not _inside(path, root):
                raise PermissionError(f"sandbox: writing outside the workspace is not allowed: {path!r}")
    sys.addaudithook(hook)


def main():
    with open(sys.argv[1]) as f:
        cfg = json.load(f)
    root = os.path.realpath(cfg["workspace"])
    landlock, seccomp = _sibling("landlock"), _sibling("seccomp")
    _apply_limits(cfg["limits"], cfg["nproc"])
    layers = ["rlimits"]
    if ctypes.CDLL(None, use_errno=True).unshare(CLONE_NEWNET) == 0:
        layers.append("netns")
    try:
        abi = landlock.restrict_writes(root)
        if abi:
            layers.append(f"landlock-v{abi}")
    except OSError:
        pass
    if seccomp.forbid_new_processes():
        layers.append("seccomp")
    if cfg.get("audit_hook", True):
        _audit_hook(root)
        layers.append("audit-hook")
    with os.fdopen(int(sys.argv[2]), "w") as report:
        report.write(json.dumps(layers))
    os.chdir(root)
    sys.argv = [cfg["script"], *cfg["args"]]
    sys.path[0] = root
    runpy.run_path(cfg["script"], run_name="__main__")


if __name__ == "__main__":
    main()
