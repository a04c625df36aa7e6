"""The parent side of the sandbox: a fresh workspace, file tools confined to it, and runs of Python code
in a limited child (see launcher.py for the layers the child applies to itself)."""

from __future__ import annotations

import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from k3.eval.sandbox.limits import Limits

LAUNCHER = Path(__file__).with_name("launcher.py")


class SandboxViolation(ValueError):
    """A tool call tried to reach outside the workspace (path traversal, symlink escape)."""


@dataclass
class RunResult:
    exit_code: int | None
    stdout: str
    stderr: str
    timed_out: bool = False
    output_exceeded: bool = False
    layers: list[str] = field(default_factory=list)   # isolation that took hold in the child

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out and not self.output_exceeded

    def summary(self, limit: int = 4000) -> str:
        """What a model sees as the tool result."""
        head = f"exit code {self.exit_code}" + (" (killed: time limit)" if self.timed_out else "") + \
            (" (killed: output limit)" if self.output_exceeded else "")
        return f"{head}\n--- stdout ---\n{self.stdout[-limit:]}\n--- stderr ---\n{self.stderr[-limit:]}"


class Sandbox:
    def __init__(self, limits: Limits = Limits(), files: dict[str, str] | None = None, audit_hook: bool = True):
        """audit_hook=False leaves only the kernel's layers (rlimits, netns, Landlock, seccomp): tests use it
        to show those hold on their own."""
        self.limits, self.audit_hook = limits, audit_hook
        self.root = Path(tempfile.mkdtemp(prefix="k3-sandbox-"))
        self.workspace = self.root / "workspace"
        self.control = self.root / "control"
        self.workspace.mkdir()
        self.control.mkdir()
        self._runs = 0
        for rel, text in (files or {}).items():
            self.write_file(rel, text)

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def resolve(self, rel: str) -> Path:
        """A path inside the workspace; anything that would leave it (.., absolute, symlinks) raises."""
        if not isinstance(rel, str) or not rel or "\x00" in rel:
            raise SandboxViolation(f"invalid path {rel!r}")
        base = self.workspace.resolve()
        target = (base / rel).resolve()
        if target != base and base not in target.parents:
            raise SandboxViolation(f"path {rel!r} is outside the workspace")
        return target

    def write_file(self, rel: str, text: str) -> None:
        path = self.resolve(rel)
        if len(text.encode()) > self.limits.file_bytes:
            raise SandboxViolation(f"{rel}: {len(text.encode())} bytes is over the {self.limits.file_bytes}-byte file limit")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    def read_file(self, rel: str, limit: int = 64 * 1024) -> str:
        path = self.resolve(rel)
        if not path.is_file():
            raise FileNotFoundError(f"{rel}: no such file in the workspace")
        with open(path, "rb") as f:
            return f.read(limit).decode(errors="replace")

    def list_files(self) -> list[str]:
        base = self.workspace.resolve()
        return sorted(str(p.relative_to(base)) for p in base.rglob("*") if p.is_file() and "__pycache__" not in p.parts)

    def run_python(self, code: str | None = None, script: Path | None = None, args: tuple[str, ...] = ()) -> RunResult:
        """Run `code` (or a script file from outside the workspace, such as a hidden check) in the child."""
        self._runs += 1
        if code is not None:
            script = self.control / f"run_{self._runs}.py"
            script.write_text(code)
        cfg = self.control / f"run_{self._runs}.json"
        cfg.write_text(json.dumps({"workspace": str(self.workspace), "limits": self.limits.to_dict(),
                                   "nproc": self._nproc(), "script": str(script), "args": list(args),
                                   "audit_hook": self.audit_hook}))
        return self._spawn(cfg)

    def _nproc(self) -> int:
        """RLIMIT_NPROC counts every process of the user, so leave room for those already running."""
        uid = os.getuid()
        mine = sum(1 for p in Path("/proc").iterdir() if p.name.isdigit() and _owner(p) == uid)
        return mine + self.limits.processes

    def _spawn(self, cfg: Path) -> RunResult:
        report_r, report_w = os.pipe()
        env = {"PATH": "/usr/bin:/bin", "HOME": str(self.workspace), "TMPDIR": str(self.workspace),
               "PYTHONDONTWRITEBYTECODE": "1", "LANG": "C.UTF-8"}
        proc = subprocess.Popen([sys.executable, "-I", str(LAUNCHER), str(cfg), str(report_w)], stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=(report_w,),
                                start_new_session=True, cwd=self.workspace, env=env)
        os.close(report_w)
        out, timed_out, exceeded = self._collect(proc)
        _kill_group(proc)
        with os.fdopen(report_r) as f:
            raw = f.read()
        layers = json.loads(raw) if raw else []
        # The workspace's random temporary path would make equal runs report different text.
        text = [b.decode(errors="replace").replace(str(self.root), "<sandbox>") for b in out]
        return RunResult(proc.returncode, text[0], text[1], timed_out, exceeded, layers)

    def _collect(self, proc) -> tuple[list[bytes], bool, bool]:
        """Read stdout/stderr until both close, the wall limit passes or the output limit is hit."""
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ, 0)
        sel.register(proc.stderr, selectors.EVENT_READ, 1)
        bufs, total, deadline = [bytearray(), bytearray()], 0, time.monotonic() + self.limits.wall_s
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                return [bytes(b) for b in bufs], True, False
            for key, _ in sel.select(timeout=min(left, 0.5)):
                chunk = os.read(key.fileobj.fileno(), 65536)
                if not chunk:
                    sel.unregister(key.fileobj)
                    continue
                keep = max(0, self.limits.output_bytes - total)
                bufs[key.data] += chunk[:keep]
                total += len(chunk)
                if total > self.limits.output_bytes:
                    return [bytes(b) for b in bufs], False, True
        try:  # both pipes closed: the child may still be running (it can close them itself)
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            return [bytes(b) for b in bufs], True, False
        return [bytes(b) for b in bufs], False, False


def _owner(proc_dir: Path) -> int | None:
    try:
        return proc_dir.stat().st_uid
    except OSError:
        return None


def _kill_group(proc: subprocess.Popen) -> None:
    """The child and anything left in its session die with it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()
    for stream in (proc.stdout, proc.stderr):
        stream.close()
