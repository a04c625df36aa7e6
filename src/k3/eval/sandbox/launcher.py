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
PR_SET_PDEATHSIG, PR_SET_DUMPABLE = 1, 4
NAMESPACES = ("user", "pid", "mnt", "ipc", "uts", "net")


def _sibling(name, register=False):
    """A module of this folder, loaded by path; `register`: importable as _k3_sandbox_NAME afterwards (wire.py,
    which the judge's and the worker's sides import)."""
    spec = importlib.util.spec_from_file_location(f"_k3_sandbox_{name}", os.path.join(os.path.dirname(__file__), f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if register:
        sys.modules[spec.name] = module
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


def _shared_layers(cfg, root):
    """The layers every process of the run shares: namespaces (checked), the view, rlimits, a network namespace."""
    layers = _namespace_layers(cfg.get("outside_ns", {})) + _view_layers(root, cfg.get("workspace_cap", 0))
    _apply_limits(cfg["limits"], cfg["nproc"])
    layers.append("rlimits")
    if "netns" not in layers and _new_netns():
        layers.append("netns")
    return layers


def _confine(cfg, root, signal_to=None, processes=False, readable=()):
    """This process's own layers: Landlock, then seccomp (`signal_to`: one more PID it may signal; `processes`:
    fork, exec and signals allowed, for a program inside its own PID namespace; `readable`: more paths it
    may read, beyond the run's: the judge's suite)."""
    layers = []
    landlock, seccomp = _sibling("landlock"), _sibling("seccomp")
    try:
        abi = landlock.restrict(root, [*cfg.get("readable", []), *readable], cfg.get("listable", []))
        if abi:
            layers.append(f"landlock-v{abi}")
    except OSError:
        pass
    if seccomp.install(signal_to, processes):
        layers.append("seccomp-processes" if processes else "seccomp")
    return layers


def _audit(cfg, root, layers):
    gc.collect()  # the sibling modules (and their ctypes) are gone before the untrusted code can look
    if cfg.get("audit_hook", True):
        _sibling("audit").install(root)
        layers.append("audit-hook")


def _prctl(option, value):
    import ctypes
    return ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0) == 0


def _judged(cfg, root, layers, report_fd):
    """Fork the worker before anything secret is read; the judge (this process) reads the check, runs it
    against the worker, and reports the verdict where the worker cannot write (see judge.py). The judge
    alone may read `spec["readable"]` (a test suite's directory)."""
    _sibling("wire", register=True)
    judge, worker = _sibling("judge"), _sibling("worker")
    spec = cfg["judge"]
    modules = spec.get("modules")
    req_r, req_w = os.pipe()
    resp_r, resp_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            for fd in (req_w, resp_r, report_fd, spec["fd"]):
                os.close(fd)
            _prctl(PR_SET_PDEATHSIG, 9)
            own = _confine(cfg, root)
            _audit(cfg, root, own)
            worker.send(resp_w, {"layers": own})   # what the tested code runs under, for the report
            os.chdir(root)
            worker.serve(req_r, resp_w, root, modules)
        finally:
            os._exit(0)
    os.close(req_r)
    os.close(resp_w)
    apart = _prctl(PR_SET_DUMPABLE, 0)
    _confine(cfg, root, signal_to=pid, readable=spec.get("readable", []))
    with os.fdopen(spec["fd"], "rb") as f:
        payload = json.loads(f.read())
    link = judge.Link(req_w, resp_r, pid, spec.get("timeout_s"))
    try:
        first = link.lines.read(30)
        layers += [str(x) for x in first["layers"]] if isinstance(first, dict) and isinstance(first.get("layers"), list) else []
    except Exception:
        pass   # a worker that died at start: the check below fails on its own
    report = os.fdopen(report_fd, "w")
    report.write(json.dumps(layers + (["judge-apart"] if apart else [])) + "\n")
    report.flush()
    os.chdir(root)
    finder = judge.WorkspaceFinder(link, root, modules)
    if payload.get("pytest"):
        verdict = _sibling("pytest_judge").run(payload["pytest"], link, root, finder)
    else:
        finder.install()
        verdict = judge.run_check(payload, link, root)
    report.write(json.dumps(verdict) + "\n")
    report.close()
    os.close(req_w)
    try:
        os.kill(pid, 9)
    except OSError:
        pass
    os.waitpid(pid, 0)


def _program(cfg, root, layers, report_fd):
    """Sandbox.exec: replace this process with the program, every layer on (seccomp letting it start others)."""
    program = cfg["program"]
    if "pidns" not in layers:   # the harness asks only under bubblewrap; never start processes without it
        raise SystemExit("k3 sandbox: a program needs a PID namespace of its own")
    layers += _confine(cfg, root, processes=True)
    with os.fdopen(report_fd, "w") as report:
        report.write(json.dumps(layers))
    env = {"PATH": f"{program['bin']}:/usr/local/bin:/usr/bin:/bin", "HOME": root, "TMPDIR": root, "LANG": "C.UTF-8",
           "PYTHONDONTWRITEBYTECODE": "1", **program["env"]}
    os.chdir(os.path.join(root, program["cwd"]) if program["cwd"] else root)
    try:
        os.execvpe(program["argv"][0], program["argv"], env)
    except OSError as e:
        sys.stderr.write(f"{program['argv'][0]}: {e.strerror}\n")
        os._exit(127 if e.errno == 2 else 126)


def main():
    with open(sys.argv[1]) as f:
        cfg = json.load(f)
    root = os.path.realpath(cfg["workspace"])
    report_fd = int(sys.argv[2])
    layers = _shared_layers(cfg, root)
    if cfg.get("judge"):
        _judged(cfg, root, layers, report_fd)
        return
    if cfg.get("program"):
        _program(cfg, root, layers, report_fd)
    layers += _confine(cfg, root)
    _audit(cfg, root, layers)
    with os.fdopen(report_fd, "w") as report:
        report.write(json.dumps(layers))
    os.chdir(root)
    sys.argv = [cfg["script"], *cfg["args"]]
    sys.path[0] = root
    runpy.run_path(cfg["script"], run_name="__main__")


if __name__ == "__main__":
    main()
