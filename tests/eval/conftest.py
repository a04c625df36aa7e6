"""Every eval test holds a shared lock on the machine's sandboxes while it runs; a test that counts the
machine's sandbox processes (sandbox_support.sandbox_processes) takes it exclusively. So with two pytest
workers (make test), no sandbox of the other worker's can start while one is counted and read as an
escapee from this one's run."""

import fcntl
import os
import tempfile

import pytest

import sandbox_support

LOCK = os.path.join(tempfile.gettempdir(), "k3-test-sandboxes.lock")


@pytest.fixture(autouse=True)
def sandboxes_shared():
    with open(LOCK, "a") as f:
        fcntl.flock(f, fcntl.LOCK_SH)
        sandbox_support.LOCK_FD = f.fileno()
        try:
            yield
        finally:
            sandbox_support.LOCK_FD = None
            fcntl.flock(f, fcntl.LOCK_UN)
