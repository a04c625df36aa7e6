"""Images made on the spot for the vision tests (a module of its own: `conftest` is a name every test
folder has, so importing helpers from it picks whichever was imported first)."""

from __future__ import annotations

import io


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
