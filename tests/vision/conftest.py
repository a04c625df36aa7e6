"""A tiny checkpoint with a vision tower in the official layout, and images made on the spot."""

from __future__ import annotations

import io

import pytest

from k3.config.presets import tiny_chat_vision
from k3.testing import make_checkpoint

pytest.importorskip("PIL", reason="image input needs Pillow (the [vision] extra)")


@pytest.fixture(scope="session")
def vision_checkpoint(tmp_path_factory):
    return make_checkpoint(tmp_path_factory.mktemp("vision"), tiny_chat_vision(), seed=3, tokenizer=True)


def encoded(size=(60, 45), color=(200, 10, 10), mode="RGB", fmt="PNG", noise: int | None = None) -> bytes:
    """An image file's bytes: a flat colour, or seeded noise (`noise`) so that every pixel matters."""
    from PIL import Image

    if noise is not None:
        import random

        img = Image.frombytes("RGB", size, random.Random(noise).randbytes(size[0] * size[1] * 3)).convert(mode)
    else:
        img = Image.new(mode, size, color)
    buf = io.BytesIO()
    img.save(buf, fmt)
    return buf.getvalue()
