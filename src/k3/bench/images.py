"""Benchmark requests with images: synthetic ones (seeded noise images of a given size, the same bytes for a
seed whatever the machine) and dataset rows that name image files. Either way a request is chat messages
whose user turn holds the text and `image_url` parts with data: URLs, as an OpenAI client sends them."""

from __future__ import annotations

import base64
import io
import random
from dataclasses import replace
from pathlib import Path

from k3.bench.prompt import BenchPrompt


def parse_size(text: str) -> tuple[int, int]:
    w, sep, h = text.lower().partition("x")
    if not sep or not w.isdigit() or not h.isdigit() or int(w) < 1 or int(h) < 1:
        raise ValueError(f"--image-size {text!r}: expected WIDTHxHEIGHT such as 448x448")
    return int(w), int(h)


def noise_png(width: int, height: int, seed: int) -> bytes:
    """A PNG of seeded noise: no structure for a codec to exploit, so decoding costs what a photo's does."""
    from PIL import Image

    rng = random.Random(seed)
    img = Image.frombytes("RGB", (width, height), rng.randbytes(width * height * 3))
    buf = io.BytesIO()
    img.save(buf, "PNG", compress_level=1)
    return buf.getvalue()


def data_url(data: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64," + base64.b64encode(data).decode()


def with_images(prompts: list[BenchPrompt], per_prompt: int, size: tuple[int, int], seed: int) -> list[BenchPrompt]:
    """Each prompt's text as a user message with `per_prompt` images of `size` (a new image per request)."""
    out = []
    for i, p in enumerate(prompts):
        urls = [data_url(noise_png(*size, seed * 100_003 + i * 101 + k)) for k in range(per_prompt)]
        out.append(replace(p, ids=None, messages=[user_message(p.text or "", urls)],
                           tag={**p.tag, "images": per_prompt, "image_size": f"{size[0]}x{size[1]}"}))
    return out


def user_message(text: str, urls: list[str]) -> dict:
    return {"role": "user", "content": [{"type": "text", "text": text}] +
            [{"type": "image_url", "image_url": {"url": u}} for u in urls]}


def row_images(row: dict, base: Path) -> list[str]:
    """A dataset row's "images" (file paths, relative to the dataset) as data: URLs."""
    names = row.get("images") or []
    if not isinstance(names, list):
        raise ValueError('"images" must be a list of image file paths')
    urls = []
    for name in names:
        path = base / name
        mime = {"jpg": "image/jpeg", "jpeg": "image/jpeg", "webp": "image/webp"}.get(path.suffix.lower()[1:], "image/png")
        try:
            urls.append(data_url(path.read_bytes(), mime))
        except OSError as e:
            raise ValueError(f"image {name}: {e.strerror or e}") from None
    return urls
