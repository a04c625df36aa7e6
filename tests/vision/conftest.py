"""A tiny checkpoint with a vision tower in the official layout."""

from __future__ import annotations

import pytest

from k3.config.presets import tiny_chat_vision
from k3.testing import make_checkpoint

pytest.importorskip("PIL", reason="image input needs Pillow (the [vision] extra)")


@pytest.fixture(scope="session")
def vision_checkpoint(tmp_path_factory):
    return make_checkpoint(tmp_path_factory.mktemp("vision"), tiny_chat_vision(), seed=3, tokenizer=True)
