"""Runs inside the sandbox child before the untrusted script: `python -I launcher.py CONFIG.json REPORT_FD`.

Self-contained (loads its sibling modules by path, never imports k3 or torch). Under bubblewrap
(isolation "namespaces") the child already has its own user, PID, mount, IPC, UTS and network
namespaces, a read-only view of only the interpreter and the workspace, and a size-capped tmpfs
workspace; the launcher checks each of those from inside. Then, in both modes, in order: resource
limits; a new, empty network namespace when it has none yet and is permitted; Landlock (writes only
under the workspace, reads only of the interpreter, the launcher and this
run's script, no TCP); seccomp (no new processes, no exec, no signals to others, foreign ABIs
killed); the audit hook. It reports the layers that took hold on the fd given as argv[2] and runs
the script as __main__ with the workspace as cwd.
"""

import gc
import importlib.util
import json
import os
import resource
import runpy
import sys

CLONE_NEWNET = 0x40000000
NAMESPACES = ("user", "pid", "mnt", "ipc", "uts", "net")


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


def _namespace_layers(outside):
    """Namespaces this process does not share with the harness (`outside`: the harness's ns links)."""
    found = []
    for ns in NAMESPACES:
        try:
            if os.readlink(f"/proc/self/ns/{ns}") != outside.get(ns):
                found.append(f"{ns}ns")
        except OSError:
            pass
    return found


def _view_layers(root, cap_bytes):
    """The filesystem the child sees: read-only outside the workspace, and the workspace's size cap."""
    found = []
    try:
        if os.statvfs("/usr").f_flag & os.ST_RDONLY and not os.path.exists("/etc/shadow"):
            found.append("read-only-minimal-fs")
        st = os.statvfs(root)
        if cap_bytes and st.f_blocks * st.f_frsize <= cap_bytes * 1.01:
            found.append(f"workspace-cap-{cap_bytes >> 20}MiB")
    except OSError:
        pass
    return found


def _new_netns():
    import ctypes
    return ctypes.CDLL(None, use_errno=True).unshare(CLONE_NEWNET) == 0


def _lock_down(cfg, root):
    layers = _namespace_layers(cfg.get("outside_ns", {})) + _view_layers(root, cfg.get("workspace_cap", 0))
    _apply_limits(cfg["limits"], cfg["nproc"])
    layers.append("rlimits")
    if "netns" not in layers and _new_netns():
        layers.append("netns")
    landlock, seccomp = _sibling("landlock"), _sibling("seccomp")
    try:
        abi = landlock.restrict(root, cfg.get("readable", []), cfg.get("listable", []))
        if abi:
            layers.append(f"landlock-v{abi}")
    except OSError:
        pass
    if seccomp.install():
        layers.append("seccomp")
    return layers


def main():
    with open(sys.argv[1]) as f:
        cfg = json.load(f)
    root = os.path.realpath(cfg["workspace"])
    layers = _lock_down(cfg, root)
    gc.collect()  # the sibling modules (and their ctypes) are gone before the script can look
    if cfg.get("audit_hook", True):
        _sibling("audit").install(root)
        layers.append("audit-hook")
    with os.fdopen(int(sys.argv[2]), "w") as report:
        report.write(json.dumps(layers))
    os.chdir(root)
    sys.argv = [cfg["script"], *cfg["args"]]
    sys.path[0] = root
    runpy.run_path(cfg["script"], run_name="__main__")


if __name__ == "__main__":
    main()
