"""The third round of outside attacks on the sandbox (issue 69): a snapshot that read every link in full
(one 16 MiB file and N links cost the harness N x 16 MiB), and a teardown that could not confirm the end of
a fork bomb's processes yet left the sandbox in use."""

from __future__ import annotations

import pytest

from k3.eval.sandbox import Limits, Sandbox, SandboxViolation, teardown
from k3.eval.sandbox.teardown import SandboxTeardownError
from sandbox_support import need_namespaces

BIG = 16 << 20


@pytest.mark.parametrize("link", ["hard", "symbolic"])
def test_a_snapshot_counts_a_file_once_per_name_and_stops_at_the_workspace_cap(link):
    need_namespaces()
    make = "os.link('big', name)" if link == "hard" else "os.symlink('big', name)"
    links = "import os\nfor i in range({}, {}):\n    name = f'l{{i}}'\n    " + make + "\n"
    with Sandbox(Limits(workspace_bytes=64 << 20)) as sb:
        assert sb.run_python(f"open('big', 'wb').write(b'x' * {BIG})\n").ok
        assert sb.run_python(links.format(0, 2)).ok
        taken = sb.snapshot()                           # 3 names x 16 MiB: within the 64 MiB cap
        assert set(taken) == {"big", "l0", "l1"} and len(taken["l1"]) == BIG
        assert taken["l0"] is taken["big"] and taken["l1"] is taken["big"]   # one file, read once
        assert sb.run_python(links.format(2, 61)).ok    # 61 names: 976 MiB counted through the links
        with pytest.raises(SandboxViolation, match="counted once per name"):
            sb.snapshot()


def test_a_sandbox_whose_processes_outlive_their_run_is_never_used_again(monkeypatch):
    """A teardown that cannot confirm every process gone (forced here: init's end and the cgroup's are never
    reported) raises, and the sandbox then refuses every call: runs, reads, writes, listings, snapshots."""
    need_namespaces()
    monkeypatch.setattr(teardown.NamespaceInit, "end", lambda self, wait_s=0: False)
    monkeypatch.setattr(teardown, "_emptied", lambda cgroup: False)
    with Sandbox(Limits(wall_s=5)) as sb:
        sb.write_file("a.py", "x = 1\n")
        with pytest.raises(SandboxTeardownError, match="did not end"):
            sb.exec(["sh", "-c", "sleep 30 & sleep 30"])
        monkeypatch.undo()
        for call in (lambda: sb.exec(["true"]), lambda: sb.run_python("print(1)"), lambda: sb.read_file("a.py"),
                     lambda: sb.write_file("b.py", "y"), sb.list_files, sb.snapshot,
                     lambda: sb.judge("assert True")):
            with pytest.raises(SandboxTeardownError, match="can no longer be used"):
                call()


def test_teardown_kills_through_the_cgroup_when_init_is_slow_to_report(monkeypatch):
    """Where init's exit is not reported in time, every process in the run's cgroup is killed, and the run
    ends cleanly once the cgroup is empty."""
    need_namespaces()
    calls = []

    def slow_end(self, wait_s=0):
        calls.append(wait_s)
        return False if len(calls) == 1 else real_end(self, wait_s)

    real_end = teardown.NamespaceInit.end
    monkeypatch.setattr(teardown.NamespaceInit, "end", slow_end)
    with Sandbox(Limits(wall_s=2)) as sb:
        if sb._cgroup is None:
            pytest.skip("no writable memory cgroup here: the second wait on init is the only fallback")
        r = sb.exec(["sh", "-c", "for i in 1 2 3 4; do sleep 60 & done; wait"])
        assert r.timed_out and sb._cgroup.pids() == []
        assert sb.exec(["true"]).exit_code == 0             # a clean end leaves the sandbox usable
