"""Image work bounded before it is done (issue 67): a pool of its own with a bound on the requests holding a
place (a 429 past it, the place given back when the work ends), the request's image tokens counted from
headers before any decoding, and the tower run in that pool with the same answer as in the engine."""

from __future__ import annotations

import asyncio
import base64
import threading
import time

import httpx
import pytest
import torch

from images_support import encoded
from k3 import LLM
from k3.media import ImageLimits
from k3.serve.app import Server
from k3.serve.image_work import ImagesBusy, ImageWork
from k3.testing.serving import serving


def test_the_bound_refuses_at_once_and_gives_places_back_when_work_ends():
    async def scenario():
        work, gate = ImageWork(workers=1, waiting=1), threading.Event()
        held = [asyncio.ensure_future(work.run(gate.wait, 10)) for _ in range(2)]   # one working, one waiting
        await asyncio.sleep(0.1)
        with pytest.raises(ImagesBusy, match="--image-workers"):
            await work.run(lambda: None)
        gate.set()
        await asyncio.gather(*held)
        assert await work.run(lambda: 7) == 7 and work.taken == 0
        work.close()

    asyncio.run(scenario())
    with pytest.raises(ValueError, match="--image-workers"):
        ImageWork(workers=0)


def _ask(url, *images, timeout=60):
    parts = [{"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(i).decode()}}
             for i in images]
    body = {"model": "default", "max_tokens": 2, "temperature": 0,
            "messages": [{"role": "user", "content": [{"type": "text", "text": "What?"}, *parts]}]}
    return httpx.post(url + "/v1/chat/completions", json=body, timeout=timeout)


def test_a_saturated_image_pool_is_a_429_and_text_still_answers(vision_checkpoint, monkeypatch):
    gate, entered = threading.Event(), threading.Event()
    original = Server.prepare_images

    def held(self, messages):
        entered.set()
        gate.wait(30)
        return original(self, messages)

    monkeypatch.setattr(Server, "prepare_images", held)
    llm = LLM(vision_checkpoint, dtype=torch.float32, cache_memory="64MiB")
    with serving(llm, image_work=ImageWork(workers=1, waiting=0)) as url:
        first = threading.Thread(target=_ask, args=(url, encoded()))
        first.start()
        assert entered.wait(30)
        r = _ask(url, encoded())
        assert r.status_code == 429 and r.headers["Retry-After"] == "1" and "image" in r.json()["error"]["message"]
        t0 = time.perf_counter()
        text = httpx.post(url + "/v1/chat/completions", json={"model": "default", "max_tokens": 2, "messages": [
            {"role": "user", "content": "hi"}]}, timeout=30)
        assert text.status_code == 200 and time.perf_counter() - t0 < 10     # text never waits for the image pool
        gate.set()
        first.join(60)
        assert _ask(url, encoded()).status_code == 200                       # the place came back


def test_image_tokens_and_pixels_are_limited_before_decoding(vision_checkpoint):
    llm = LLM(vision_checkpoint, dtype=torch.float32, cache_memory="64MiB")
    limits = ImageLimits(max_image_tokens=3000, max_pixels=5_000_000)
    with serving(llm, image_limits=limits) as url:
        big = encoded(size=(1920, 1080), fmt="JPEG")                          # 2,691 image tokens
        assert _ask(url, big).status_code == 200
        r = _ask(url, big, big)
        assert r.status_code == 400 and "5,382 image tokens together, over the limit of 3,000" in r.json()["error"]["message"]
        r = _ask(url, encoded(size=(2500, 2100)))
        assert r.status_code == 400 and "over the limit of 5,000,000" in r.json()["error"]["message"]


def test_the_tower_ahead_in_the_pool_gives_the_engines_rows(vision_checkpoint):
    from k3.engine.image_prompts import prepare_all

    from k3.serve.async_engine import AsyncEngine

    llm = LLM(vision_checkpoint, dtype=torch.float32, cache_memory="64MiB")
    client = AsyncEngine(llm.engine)                                  # the server's one way to the model
    [image] = prepare_all([encoded(size=(90, 60), noise=4)], llm.media, ImageLimits())
    try:
        [ahead] = client.encode_images([image])
    finally:
        client.shutdown()
    pixels, grid = image.pixel_values, torch.tensor([list(image.grid)])
    [rows] = llm.engine.model.encode_images(pixels, grid)
    assert torch.equal(ahead.rows, rows) and image.rows is None
