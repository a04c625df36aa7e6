"""The default sandbox needs bubblewrap. CI installs it and sets K3_REQUIRE_SANDBOX=1, so there a missing
bwrap fails the run instead of skipping the sandbox's tests."""

from __future__ import annotations

import os

import pytest

from k3.eval.sandbox import namespaces


def need_namespaces() -> None:
    why = namespaces.missing()
    if why is None:
        return
    if os.environ.get("K3_REQUIRE_SANDBOX") == "1":
        pytest.fail(f"K3_REQUIRE_SANDBOX=1 but the default sandbox cannot run: {why}")
    pytest.skip(f"the default sandbox needs bubblewrap: {why} ({namespaces.INSTALL_HINT})")
