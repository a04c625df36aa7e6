"""Attacks that escaped the sandbox before it ran in namespaces (issue 17), each run against the default
isolation with the audit hook on ("full") and, where the attack does not need the hook's absence to be
meaningful, with the kernel's layers alone ("kernel-only")."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time

import pytest

from k3.eval.sandbox import Limits, Sandbox
from sandbox_support import need_namespaces, sandbox_processes

# x86-64 machine code, called through a ctypes function pointer on an executable mmap (no dlopen)
KILL = "b83e000000" "bf{pid}" "be09000000" "0f05" "c3"      # mov eax,62; mov edi,PID; mov esi,9; syscall; ret
I386_FORK = "b802000000" "cd80" "c3"                         # mov eax,2 (i386 fork); int 0x80; ret
CALL_MACHINE_CODE = """
import ctypes, mmap
m = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
m.write(bytes.fromhex({code!r}))
fn = ctypes.CFUNCTYPE(ctypes.c_long)(ctypes.addressof(ctypes.c_char.from_buffer(m)))
ret = fn()
"""


@pytest.fixture(params=["full", "kernel-only"])
def sandbox(request):
    need_namespaces()
    with Sandbox(Limits(wall_s=20, cpu_s=10, workspace_bytes=32 << 20), audit_hook=request.param == "full") as sb:
        yield sb


@pytest.fixture
def victim():
    """A process of the same user, outside the sandbox."""
    proc = subprocess.Popen(["sleep", "60"])
    yield proc
    proc.kill()
    proc.wait()


def _alive(proc) -> bool:
    return proc.poll() is None


def test_cannot_signal_processes_outside(sandbox, victim):
    code = (f"import os, signal\npid = {victim.pid}\n"
            "for name, attempt in (('kill', lambda: os.kill(pid, 9)),\n"
            "                      ('pidfd', lambda: signal.pidfd_send_signal(os.pidfd_open(pid), 9)),\n"
            "                      ('harness', lambda: os.kill(os.getppid(), 9))):\n"
            "    try:\n        attempt()\n        print('SIGNALLED', name)\n"
            "    except OSError as e:\n        print('blocked', name, type(e).__name__)\n")
    r = sandbox.run_python(code)
    time.sleep(0.2)
    assert _alive(victim), r.summary()
    assert "SIGNALLED kill" not in r.stdout and "SIGNALLED pidfd" not in r.stdout, r.summary()


def test_raw_kill_syscall_from_machine_code(sandbox, victim):
    pid = victim.pid.to_bytes(4, "little").hex()
    r = sandbox.run_python(CALL_MACHINE_CODE.format(code=KILL.format(pid=pid)) + "print('returned', ret)\n")
    time.sleep(0.2)
    assert _alive(victim), r.summary()
    if sandbox.audit_hook:
        assert "sandbox: importing ctypes is not allowed" in r.stderr, r.summary()
    else:  # the syscall ran and the kernel refused it: no such process in this PID namespace, or EPERM
        assert "returned -" in r.stdout, r.summary()


def test_foreign_abi_fork_is_killed_and_nothing_outlives_the_run(sandbox):
    before = sandbox_processes()
    code = CALL_MACHINE_CODE.format(code=I386_FORK) + (
        "import os, time\nif ret == 0:\n    os.setsid()\n    time.sleep(30)\nprint('FORKED', ret)\n")
    r = sandbox.run_python(code)
    time.sleep(0.3)
    assert "FORKED" not in r.stdout, r.summary()
    assert sandbox_processes() - before == set(), "a process of the sandbox outlived its run"
    if not sandbox.audit_hook:
        # seccomp kills a foreign-ABI syscall (bubblewrap's init reports a signal death as 128 + N)
        assert r.exit_code in (-signal.SIGSYS, 128 + signal.SIGSYS), r.summary()


def test_audit_hook_cannot_be_disabled_through_gc():
    need_namespaces()
    code = ("import gc, sys\ntry:\n    for obj in gc.get_objects():\n"
            "        if callable(obj) and getattr(obj, '__closure__', None):\n"
            "            for cell in obj.__closure__:\n                cell.cell_contents = frozenset()\n"
            "    print('WALKED')\nexcept PermissionError as e:\n    print('blocked', e)\n"
            "try:\n    import ctypes\n    print('HOOK OFF')\nexcept ImportError as e:\n    print('still on', e)\n")
    with Sandbox() as sb:
        r = sb.run_python(code)
    assert "blocked" in r.stdout and "still on" in r.stdout and "HOOK OFF" not in r.stdout, r.summary()


def test_metadata_of_files_outside_cannot_change(sandbox, tmp_path):
    target = tmp_path / "outside.txt"
    target.write_text("x")
    os.chmod(target, 0o644)
    os.utime(target, (1_000_000, 1_000_000))
    code = (f"import os\npath = {str(target)!r}\nfor name, attempt in (('chmod', lambda: os.chmod(path, 0o777)),\n"
            "                      ('utime', lambda: os.utime(path, (0, 0)))):\n"
            "    try:\n        attempt()\n        print('CHANGED', name)\n"
            "    except OSError as e:\n        print('blocked', name, type(e).__name__)\n")
    r = sandbox.run_python(code)
    assert "CHANGED" not in r.stdout and r.stdout.count("blocked") == 2, r.summary()
    assert target.stat().st_mode & 0o777 == 0o644 and target.stat().st_mtime == 1_000_000


def test_nothing_outside_the_workspace_is_readable(sandbox):
    (sandbox.control / "hidden_check.py").write_text("SECRET = 1\n")
    paths = ["/etc/shadow", "/etc/passwd", str(sandbox.control / "hidden_check.py"), str(sandbox.control),
             f"/proc/{os.getpid()}/environ", os.path.expanduser("~")]
    code = (f"import os\nfor path in {paths!r}:\n    try:\n"
            "        print('READ', path, len(os.listdir(path) if os.path.isdir(path) else open(path, 'rb').read()))\n"
            "    except OSError as e:\n        print('blocked', path, type(e).__name__)\n")
    r = sandbox.run_python(code)
    assert "READ" not in r.stdout and r.stdout.count("blocked") == len(paths), r.summary()


def test_the_workspace_has_a_total_size_cap(sandbox):
    """Many files each under the per-file limit cannot add up past the workspace's cap (32 MiB here)."""
    code = ("import os\nwritten = 0\ntry:\n    for i in range(64):\n        with open(f'f{i}', 'wb') as f:\n"
            "            f.write(b'x' * (4 << 20))\n        written += 4 << 20\nexcept OSError as e:\n"
            "    print('stopped', e.errno)\nprint('written', written >> 20)\n")
    r = sandbox.run_python(code)
    assert "stopped 28" in r.stdout, r.summary()              # ENOSPC
    used = sum(os.path.getsize(sandbox.workspace / name) for name in sandbox.list_files())
    assert used <= 32 << 20


def test_unix_sockets_and_libraries_outside_are_out_of_reach(sandbox, tmp_path):
    path = str(tmp_path / "outside.sock")
    servers = [socket.socket(socket.AF_UNIX), socket.socket(socket.AF_UNIX)]
    servers[0].bind(path)
    servers[1].bind("\0k3-test-abstract")
    for s in servers:
        s.listen(1)
    lib = tmp_path / "libx.so"
    lib.write_bytes(open("/proc/self/exe", "rb").read(0))  # an empty file is enough to show it is not seen
    code = (f"import socket\nfor addr in ({path!r}, '\\0k3-test-abstract'):\n    s = socket.socket(socket.AF_UNIX)\n"
            "    try:\n        s.connect(addr)\n        print('CONNECTED', repr(addr))\n"
            "    except OSError as e:\n        print('blocked', type(e).__name__)\n"
            f"import os\nprint('lib visible' if os.path.exists({str(lib)!r}) else 'lib hidden')\n")
    try:
        r = sandbox.run_python(code)
    finally:
        for s in servers:
            s.close()
    assert "CONNECTED" not in r.stdout and r.stdout.count("blocked") == 2, r.summary()
    assert "lib hidden" in r.stdout, r.summary()


def test_report_names_every_layer_of_the_default():
    need_namespaces()
    with Sandbox(Limits(workspace_bytes=16 << 20)) as sb:
        layers = sb.run_python("pass").layers
    for layer in ("bubblewrap", "userns", "pidns", "mntns", "ipcns", "netns", "read-only-minimal-fs",
                  "workspace-cap-16MiB", "rlimits", "seccomp", "audit-hook"):
        assert layer in layers, layers
