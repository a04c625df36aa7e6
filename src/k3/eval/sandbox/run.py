"""The parent side of the sandbox: a fresh workspace, file tools confined to it, and runs of Python code
in a limited child (see launcher.py for the layers the child applies to itself)."""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from k3.eval.sandbox import hidden, namespaces, teardown, wire
from k3.eval.sandbox.cgroup import MemoryCgroup
from k3.eval.sandbox.namespaces import SandboxUnavailable
from k3.eval.sandbox.limits import Limits, nproc_limit
from k3.eval.sandbox.paths import SandboxViolation, WorkspaceFiles, printable
from k3.eval.sandbox.result import RunResult, collect, read_report
from k3.eval.sandbox.teardown import SandboxTeardownError

LAUNCHER = Path(__file__).with_name("launcher.py")
ISOLATIONS = ("namespaces", "process")
CGROUP_SLACK = 256 << 20   # the interpreter's own pages and kernel buffers, beyond RLIMIT_AS and the workspace


def _usable(method):
    """A sandbox whose processes could not be confirmed gone (teardown.py) refuses every later call."""
    @functools.wraps(method)
    def checked(self, *args, **kwargs):
        if self._ended is not None:
            raise SandboxTeardownError(f"this sandbox can no longer be used ({self._ended}); close it and make "
                                       "a new one")
        return method(self, *args, **kwargs)
    return checked


class Sandbox:
    """A workspace and the runs of Python code in it.

    isolation "namespaces" (the default) needs bubblewrap and user namespaces and raises
    SandboxUnavailable, naming what to install, where they are missing. "process" is the weaker
    fallback (the child's own rlimits, Landlock, seccomp and audit hook, no namespaces beyond the
    network one, no total size cap); it must be asked for and warns once."""

    def __init__(self, limits: Limits = Limits(), files: dict[str, str] | None = None, audit_hook: bool = True,
                 isolation: str = "namespaces"):
        """audit_hook=False leaves only the kernel's layers: tests use it to show those hold on their own."""
        if isolation not in ISOLATIONS:
            raise ValueError(f"isolation must be one of {', '.join(ISOLATIONS)}, not {isolation!r}")
        if isolation == "namespaces":
            namespaces.require()
        else:
            namespaces.warn_weak()
        self.limits, self.audit_hook, self.isolation = limits, audit_hook, isolation
        self._ended: str | None = None
        self.root = Path(tempfile.mkdtemp(prefix="k3-sandbox-"))
        self.control = self.root / "control"
        self.control.mkdir()
        host_workspace = self.root / "workspace"
        host_workspace.mkdir()
        self._host_workspace, self._mount = host_workspace, None
        if isolation == "namespaces":
            try:
                self._mount = namespaces.WorkspaceMount(host_workspace, limits.workspace_bytes)
            except BaseException:
                shutil.rmtree(self.root, ignore_errors=True)
                raise
            self.workspace, self.view = self._mount.path, namespaces.MOUNT_POINT
        else:
            self.workspace, self.view = host_workspace, str(host_workspace.resolve())
        self._files = WorkspaceFiles(self.workspace, self.view)
        # Everything a run is charged for, all its processes together (cgroup.py); None where none can be had.
        self._cgroup = MemoryCgroup.make(limits.memory_bytes + limits.workspace_bytes + CGROUP_SLACK)
        self._runs = 0
        for rel, text in (files or {}).items():
            self.write_file(rel, text)

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if getattr(self, "_cgroup", None) is not None:
            self._cgroup.close()
            self._cgroup = None
        if getattr(self, "_files", None) is not None:
            self._files.close()
            self._files = None
        if self._mount is not None:
            self._mount.close()
            self._mount = None
        shutil.rmtree(self.root, ignore_errors=True)

    @_usable
    def write_file(self, rel: str, text: str | bytes) -> None:
        data = text if isinstance(text, bytes) else text.encode("utf-8", "surrogateescape")
        if len(data) > self.limits.file_bytes:
            raise SandboxViolation(f"{rel}: {len(data)} bytes is over the {self.limits.file_bytes}-byte file limit")
        self._files.write(rel, data)

    def read_file(self, rel: str, limit: int = 64 * 1024) -> str:
        return self.read_bytes(rel, limit).decode(errors="replace")

    @_usable
    def read_bytes(self, rel: str, limit: int = 64 * 1024) -> bytes:
        """At most `limit` bytes of a regular file in the workspace."""
        try:
            return self._files.read(rel, limit)
        except FileNotFoundError:
            raise FileNotFoundError(f"{printable(rel)}: no such file in the workspace") from None

    @_usable
    def list_files(self) -> list[str]:
        """Files and links in the workspace, never following a link, at most paths.MAX_LISTED of them."""
        return self._files.list()[0]

    @_usable
    def snapshot(self, skip: tuple[str, ...] = ("__pycache__", ".pytest_cache")) -> dict[str, bytes]:
        """Every regular file in the workspace -> its bytes: what a run left, to judge in another sandbox."""
        return self._files.snapshot(skip, self.limits.file_bytes, self.limits.workspace_bytes)

    @_usable
    def run_python(self, code: str | None = None, script: Path | None = None, args: tuple[str, ...] = (),
                   stdin: bytes = b"") -> RunResult:
        """Run `code` (or a script file from outside the workspace) in the child, `stdin` (at most a pipe's
        64 KiB) on its standard input. Arguments naming files outside the workspace are shown to the child
        read-only, as is the script; nothing else of the harness's (other runs' scripts) is visible.
        A verdict about code in the workspace comes from `judge`, never from a run's output or exit code."""
        if len(stdin) > 65536:
            raise ValueError("Sandbox.run_python: stdin is limited to 64 KiB (a pipe's buffer)")
        self._runs += 1
        if code is not None:
            script = self.control / f"run_{self._runs}.py"
            script.write_text(code)
        return self._run(str(script), args, stdin)

    @_usable
    def judge(self, check: str, answer: str | None = None, prelude: str = "", from_answer: tuple[str, ...] = (),
              checker: Path | None = None) -> RunResult:
        """Run the trusted `check` (Python source, never visible inside) in a judge process apart from the code
        it tests (judge.py); `RunResult.verdict` holds {"passes", "error", "runs", "findings"}, or is None when
        the run ended before the judge could say (a failure). The check imports workspace modules as usual; or,
        with `answer` (source), it sees the answer's public names, loaded as a module in the worker, plus the
        names `prelude` (trusted source run in the judge) defines other than `from_answer`. `checker` is
        code_checker.py, whose static findings about the answer are taken before the answer runs."""
        self._runs += 1
        payload, files = {"check": check, "prelude": prelude, "from_answer": list(from_answer)}, []
        if answer is not None:
            path = self.control / f"answer_{self._runs}.py"
            path.write_text(answer, encoding="utf-8", errors="surrogateescape")
            payload["answer"] = str(path)
            files.append(str(path))
        if checker is not None:
            payload["checker"] = str(checker)
            files.append(str(checker))
        return self._run(str(LAUNCHER), tuple(files), b"", payload)

    @_usable
    def exec(self, argv: list[str], stdin: bytes = b"", cwd: str | None = None, env: dict[str, str] | None = None,
             timeout: float | None = None) -> RunResult:
        """Run a program (a shell, the interpreter, pytest) in the workspace: unlike `run_python`, it and its
        children may fork and exec, inside the run's own PID namespace (seccomp keeps every other rule;
        Landlock, the rlimits and the namespaces hold for all of them; no audit hook, since the program need
        not be Python). Needs isolation "namespaces": without a PID namespace of its own, a process tree
        could outlive the run. `cwd` is relative to the workspace; `env` adds to a minimal environment whose
        PATH has this interpreter's bin directory first; `timeout` (seconds) replaces the wall limit."""
        if self.isolation != "namespaces":
            raise SandboxUnavailable("Sandbox.exec needs isolation 'namespaces' (its processes need a PID namespace "
                                     f"of their own): {namespaces.INSTALL_HINT}")
        if not argv or not all(isinstance(a, str) and "\x00" not in a for a in argv):
            raise ValueError("Sandbox.exec: argv must be a non-empty list of strings without NUL bytes")
        if len(stdin) > 65536:
            raise ValueError("Sandbox.exec: stdin is limited to 64 KiB (a pipe's buffer)")
        self._runs += 1
        program = {"argv": list(argv), "cwd": cwd or "", "env": dict(env or {}),
                   "bin": os.path.dirname(sys.executable)}
        return self._run(str(LAUNCHER), (), stdin, program=program, wall_s=timeout)

    def _run(self, script: str, args: tuple[str, ...], stdin: bytes, payload: dict | None = None,
             program: dict | None = None, wall_s: float | None = None, judge: dict | None = None) -> RunResult:
        """`judge`: more of the judge's settings (its suite's host directory, what it alone reads, the modules
        it proxies, the worker's time a request)."""
        judge = dict(judge or {})
        suite = judge.pop("suite", None)
        cfg = self.control / f"run_{self._runs}.json"
        shown = {script: None, **{a: None for a in args if self._is_harness_file(a)}}
        if self.isolation == "namespaces":
            shown = {host: f"{namespaces.CONTROL_POINT}/{i}-{Path(host).name}" for i, host in enumerate(shown)}
            shown[str(cfg)] = f"{namespaces.CONTROL_POINT}/config.json"
            readable = [namespaces.CONTROL_POINT, namespaces.LAUNCHER_POINT]
        else:
            shown = {host: host for host in shown} | {str(cfg): str(cfg)}
            readable = [str(LAUNCHER.parent), *shown]
        interpreter, listable = hidden.read_rules(tuple(namespaces.interpreter_dirs()))
        readable += [*namespaces.SYSTEM_DIRS, *interpreter, "/proc/self", "/dev/urandom", "/dev/zero"]
        judge_pipe = os.pipe() if payload is not None else None
        if payload is not None:
            payload = {k: shown.get(v, v) if k in ("answer", "checker") else v for k, v in payload.items()}
        cfg.write_text(json.dumps({
            "workspace": self.view, "limits": self.limits.to_dict(), "nproc": nproc_limit(self.limits.processes),
            "script": shown[script], "args": [shown.get(a, a) for a in args], "audit_hook": self.audit_hook,
            "outside_ns": namespaces.harness_links(), "readable": readable, "listable": listable,
            "workspace_cap": self.limits.workspace_bytes if self._mount else 0,
            "judge": {"fd": judge_pipe[0], **judge} if judge_pipe else None, "program": program}))
        return self._spawn(shown, shown[str(cfg)], stdin, judge_pipe, payload, wall_s, suite)

    @_usable
    def judge_tests(self, suite: dict[str, bytes], modules: list[str], timeout_s: float = 60.0) -> RunResult:
        """Run the pytest `suite` ({path: bytes}, the test files and their data) in a judge process against the
        workspace's code in the worker (pytest_judge.py): the suite lies in a directory only the judge may
        read, every module named in `modules` (the repository's top-level names) is a proxy to the worker,
        and no code of the workspace's runs in the judge. `RunResult.verdict` holds {"outcomes": {test id:
        passed | failed | skipped | error}, "exit", "error", "worker"} (None when the run ended before the
        judge could say). `timeout_s`: seconds the worker has for one request before it is stopped."""
        self._runs += 1
        host = self.control / f"suite_{self._runs}"
        try:
            for rel, data in suite.items():
                path = host / "tests" / rel
                if ".." in Path(rel).parts or Path(rel).is_absolute():
                    raise ValueError(f"Sandbox.judge_tests: {rel!r} is not a relative path inside the suite")
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
            (host / "pytest.ini").write_text("[pytest]\naddopts =\n")
            inside = namespaces.SUITE_POINT if self.isolation == "namespaces" else str(host)
            judge = {"readable": [inside], "modules": sorted(modules), "timeout_s": timeout_s, "suite": str(host)}
            return self._run(str(LAUNCHER), (), b"", {"pytest": {"dir": inside}}, judge=judge)
        finally:
            shutil.rmtree(host, ignore_errors=True)

    def _is_harness_file(self, arg: str) -> bool:
        return os.path.isabs(arg) and os.path.isfile(arg) and not self._under_workspace(arg)

    def _under_workspace(self, arg: str) -> bool:
        return arg == self.view or arg.startswith(self.view + "/")

    def _argv(self, shown: dict[str, str], cfg: str, info_w: int, suite: str | None = None) -> list[str]:
        """The child's command line; `cfg` is the run's config as the child sees it, `info_w` the fd on which
        bubblewrap reports its namespace's init, `suite` a judge's test suite directory (mounted apart)."""
        if self.isolation == "namespaces":
            shown = {**shown, suite: namespaces.SUITE_POINT} if suite else shown
            prefix = namespaces.command(self._mount, self._host_workspace, shown, LAUNCHER.parent, info_w)
            return [*prefix, sys.executable, "-I", f"{namespaces.LAUNCHER_POINT}/{LAUNCHER.name}", cfg]
        return [sys.executable, "-I", str(LAUNCHER), cfg]

    def _spawn(self, shown: dict[str, str], cfg: str, stdin: bytes, judge_pipe: tuple[int, int] | None = None,
               payload: dict | None = None, wall_s: float | None = None, suite: str | None = None) -> RunResult:
        report_r, report_w = os.pipe()
        info_r, info_w = os.pipe()
        extra = (judge_pipe[0],) if judge_pipe else ()
        home = self.view
        env = {"PATH": "/usr/bin:/bin", "HOME": home, "TMPDIR": home, "PYTHONDONTWRITEBYTECODE": "1", "LANG": "C.UTF-8"}
        try:
            argv = [*self._argv(shown, cfg, info_w, suite), str(report_w)]
            proc = subprocess.Popen(self._cgroup.wrap(argv) if self._cgroup else argv,
                                    stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=(report_w, info_w, *extra),
                                    start_new_session=True, cwd=self.root if self._mount else self.workspace, env=env)
        finally:
            for fd in (report_w, info_w, *extra):
                os.close(fd)
        if judge_pipe:   # the check reaches only the judge, which reads it after the worker has closed the pipe
            threading.Thread(target=wire.send_and_close, args=(judge_pipe[1], payload), daemon=True).start()
        try:
            init = teardown.NamespaceInit(teardown.read_info(info_r, proc).get("child-pid")) if self._mount else None
        finally:
            os.close(info_r)
        try:
            if stdin:
                try:
                    proc.stdin.write(stdin)
                    proc.stdin.close()
                except BrokenPipeError:  # the child exited before reading it
                    pass
            out, timed_out, exceeded = collect(proc, self.limits.wall_s if wall_s is None else wall_s,
                                              self.limits.output_bytes)
        finally:
            try:
                teardown.end_run(proc, init, self._cgroup)
            except teardown.SandboxTeardownError as e:
                self._ended = str(e)     # its processes may live on: nothing may touch its workspace again
                raise
        layers, verdict = read_report(report_r)
        if self._mount and layers:
            layers.insert(0, "bubblewrap")
        if self._cgroup and layers:
            layers.append(self._cgroup.layer)
        # The workspace's random temporary path would make equal runs report different text.
        text = [b.decode(errors="replace").replace(str(self.root), "<sandbox>") for b in out]
        return RunResult(proc.returncode, text[0], text[1], timed_out, exceeded, layers,
                         verdict if judge_pipe else None)
