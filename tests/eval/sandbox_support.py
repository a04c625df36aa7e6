"""The default sandbox needs bubblewrap. CI installs it and sets K3_REQUIRE_SANDBOX=1, so there a missing
bwrap fails the run instead of skipping the sandbox's tests."""

from __future__ import annotations

import os

import pytest
import sandbox_lock

from k3.eval.sandbox import namespaces


def need_namespaces() -> None:
    why = namespaces.missing()
    if why is None:
        return
    if os.environ.get("K3_REQUIRE_SANDBOX") == "1":
        pytest.fail(f"K3_REQUIRE_SANDBOX=1 but the default sandbox cannot run: {why}")
    pytest.skip(f"the default sandbox needs bubblewrap: {why} ({namespaces.INSTALL_HINT})")


def sandbox_processes() -> set[int]:
    """PIDs of every process of any sandbox run (the launcher's command line), seen from the harness. The
    first call in a test makes its lock exclusive: no other worker's sandbox starts while this test counts."""
    sandbox_lock.exclusive()
    found = set()
    for p in os.listdir("/proc"):
        try:
            with open(f"/proc/{p}/cmdline", "rb") as f:
                if b"launcher.py" in f.read():
                    found.add(int(p))
        except (OSError, ValueError):
            pass
    return found
