"""One lock on the machine's sandboxes, shared by every test while it runs (tests/conftest.py) and taken
exclusively by a test that counts the machine's sandbox processes (tests/eval/sandbox_support.py).

With two pytest workers (make test), a sandbox started by the other worker's test — an eval test, or a docs
page whose `k3 eval` command runs HumanEval in the sandbox — must not start while one test counts, or it
reads as an escapee from that test's run. Every test holds the shared lock, not only tests/eval's: the docs
tests run sandboxes too (CI once failed on exactly that)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile

PATH = os.path.join(tempfile.gettempdir(), "k3-test-sandboxes.lock")
_fd: int | None = None


@contextlib.contextmanager
def shared():
    """Held around every test."""
    global _fd
    with open(PATH, "a") as f:
        fcntl.flock(f, fcntl.LOCK_SH)
        _fd = f.fileno()
        try:
            yield
        finally:
            _fd = None
            fcntl.flock(f, fcntl.LOCK_UN)


def exclusive() -> None:
    """Make this test's hold exclusive (until it ends): no other test's sandbox starts meanwhile."""
    if _fd is not None:
        fcntl.flock(_fd, fcntl.LOCK_EX)
