"""Images through `k3 serve`'s chat API (OpenAI's image_url parts), the token accounting, the limits, and
every kind of bad image answered with a 400 that names it, the server serving on."""

from __future__ import annotations

import base64
import io
import os
import shutil

import httpx
import pytest
import torch

from images_support import encoded
from k3 import LLM, SamplingParams
from k3.media import ImageLimits
from k3.testing.serving import serving


def _url(data: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64," + base64.b64encode(data).decode()


def _part(url: str) -> dict:
    return {"type": "image_url", "image_url": {"url": url}}


@pytest.fixture(scope="module")
def server(vision_checkpoint, tmp_path_factory):
    media_dir = tmp_path_factory.mktemp("media")
    (media_dir / "cat.png").write_bytes(encoded(noise=9))
    llm = LLM(vision_checkpoint, dtype=torch.float32, cache_memory="64MiB")
    with serving(llm, image_limits=ImageLimits(max_images=3), allowed_local_media_path=str(media_dir)) as url:
        yield url, llm, media_dir


def _ask(url: str, content, timeout: float = 60, **extra) -> httpx.Response:
    body = {"model": "default", "max_tokens": 3, "temperature": 0,
            "messages": [{"role": "user", "content": content}], **extra}
    return httpx.post(url + "/v1/chat/completions", json=body, timeout=timeout)


def test_an_image_url_part_is_answered_and_counted(server):
    url, llm, _ = server
    image = encoded(size=(90, 60), noise=10)
    content = [{"type": "text", "text": "What is this?"}, _part(_url(image))]
    r = _ask(url, content)
    assert r.status_code == 200, r.text
    offline = LLM(llm.model, tokenizer=llm.tokenizer, cache_memory="64MiB").chat(    # the served one is the server's
        [{"role": "user", "content": [content[0], {"type": "image", "image": image}]}],
        SamplingParams(max_tokens=3, temperature=0))[0]
    assert r.json()["usage"]["prompt_tokens"] == len(offline.output.prompt_token_ids)
    assert r.json()["choices"][0]["message"]["content"] == offline.message.content
    count = httpx.post(url + "/tokenize", json={"messages": [{"role": "user", "content": content}]}).json()["count"]
    assert count == len(offline.output.prompt_token_ids)


def test_streamed_with_usage(server):
    url, _, _ = server
    r = _ask(url, [_part(_url(encoded(fmt="JPEG"), "image/jpeg"))], stream=True, stream_options={"include_usage": True})
    assert r.status_code == 200 and '"prompt_tokens"' in r.text and r.text.rstrip().endswith("[DONE]")


def test_local_files_only_under_the_allowed_directory(server, tmp_path):
    url, _, media_dir = server
    assert _ask(url, [_part(str(media_dir / "cat.png"))]).status_code == 200
    assert _ask(url, [_part("file://" + str(media_dir / "cat.png"))]).status_code == 200
    assert _ask(url, [_part("FILE://" + str(media_dir / "cat.png"))]).status_code == 200     # a scheme has no case
    shutil.copy(media_dir / "cat.png", tmp_path / "secret.png")
    r = _ask(url, [_part(str(tmp_path / "secret.png"))])
    assert r.status_code == 400 and "outside the directory" in r.json()["error"]["message"]


def test_a_fifo_or_a_missing_file_is_a_400_that_shows_no_server_path(server):
    url, _, media_dir = server
    fifo = media_dir / "pipe.png"
    if not fifo.exists():
        os.mkfifo(fifo)
    for name, message in (("pipe.png", "is not a regular file"), ("gone.png", "cannot read the image file gone.png")):
        r = _ask(url, [_part(name)])                                  # a FIFO used to hang the request for good
        assert r.status_code == 400 and message in r.json()["error"]["message"], r.text
        assert str(media_dir) not in r.text


@pytest.mark.parametrize("size", [(1, 79_000_000), (79_000_000, 1)], ids=["tall-strip", "wide-strip"])
def test_extreme_aspect_ratios_are_400s_not_500s(server, size):
    from PIL import Image

    buf = io.BytesIO()
    Image.new("L", size).save(buf, "PNG")                             # ~100 KB that decode to 79 M pixels
    r = _ask(url := server[0], [_part(_url(buf.getvalue()))])
    assert r.status_code == 400 and "less extreme aspect ratio" in r.json()["error"]["message"], r.text
    assert httpx.get(url + "/health").json()["status"] == "ok"


BAD = [
    ("data:text/plain;base64,aGVsbG8=", "is not an image"),
    ("https://example.com/cat.png", "does not fetch images"),
    (_url(encoded(size=(300, 300), noise=11)[:500]), "corrupt, truncated"),
    (_url(b"GIF89a" + b"\0" * 20, "image/png"), "corrupt, truncated or not an image"),
    (_url(encoded(fmt="GIF"), "image/gif"), "image/gif images are not accepted"),
    ("data:image/png;base64,%%%", "invalid base64"),
]


@pytest.mark.parametrize("image_url,message", BAD)
def test_bad_images_are_400s_that_name_the_problem(server, image_url, message):
    url, _, _ = server
    r = _ask(url, [{"type": "text", "text": "x"}, _part(image_url)])
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert message in err["message"] and err["param"] == "messages"
    assert httpx.get(url + "/health").json()["status"] == "ok"


def test_too_many_images_video_and_misplaced_images_are_400s(server):
    url, _, _ = server
    png = _url(encoded())
    r = _ask(url, [_part(png)] * 4)
    assert r.status_code == 400 and "over the limit of 3" in r.json()["error"]["message"]
    r = _ask(url, [{"type": "video_url", "video_url": {"url": "x"}}])
    assert r.status_code == 400 and "takes images only" in r.json()["error"]["message"]
    body = {"model": "default", "messages": [{"role": "system", "content": [_part(png)]},
                                             {"role": "user", "content": "hi"}]}
    r = httpx.post(url + "/v1/chat/completions", json=body)
    assert r.status_code == 400 and "user messages only" in r.json()["error"]["message"]


def test_a_text_only_server_refuses_images_with_a_400(vision_checkpoint):
    llm = LLM(vision_checkpoint, vision=False, cache_memory="64MiB")
    with serving(llm) as url:
        r = _ask(url, [_part(_url(encoded()))])
        assert r.status_code == 400 and "takes text only" in r.json()["error"]["message"]
        assert _ask(url, "plain text").status_code == 200


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None and not os.environ.get("CI"), reason="Debian chromium not installed; CI has it")
def test_the_chat_page_attaches_an_image(server, tmp_path):
    from playwright.sync_api import sync_playwright

    url, _, _ = server
    picture = tmp_path / "picture.png"
    picture.write_bytes(encoded(size=(80, 50), noise=12))
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page()
        page.goto(url + "/")
        page.wait_for_function("document.getElementById('model').textContent === 'default'")
        page.set_input_files("#image", str(picture))
        page.wait_for_function("window.k3chat.images.length === 1")
        assert "picture.png" in page.inner_text("#attached")
        page.fill("#input", "What is in the picture?")
        page.click("#send")
        page.wait_for_selector('.assistant[data-done="1"]', timeout=60_000)
        sent = page.evaluate("window.k3chat.messages[0].content")
        assert sent[0] == {"type": "text", "text": "What is in the picture?"}
        assert sent[1]["image_url"]["url"].startswith("data:image/png;base64,")
        assert page.locator(".user img.thumb").count() == 1 and not page.inner_text("#attached")
        assert not page.inner_text(".assistant .answer").startswith("error")
        browser.close()


@pytest.mark.parametrize("size", [(1280, 1280), (1920, 1080), (4032, 3024), (7200, 50)],
                         ids=["1280-square", "1920x1080", "phone-4032x3024", "panorama-7200x50"])
def test_ordinary_photos_of_every_size_are_answered_with_the_reference_pad_count(server, size):
    """Each image block holds exactly the pads the released processor's arithmetic gives (plan_resize, checked
    against the reference in test_preprocess.py): a block is thousands of `<|media_pad|>` names, past the
    tokenizer's 25,000-character cutting length, and a name cut in two used to become text."""
    from k3.media import image_block, plan_resize

    url, llm, _ = server
    pads = plan_resize(*size).num_tokens
    # (a phone photo's 62,208 patches take the tower many seconds, at the image pool's lower priority while the
    # other test worker runs: the time is benchmarks/vision.py's to measure, not this test's)
    r = _ask(url, [{"type": "text", "text": "Describe it."}, _part(_url(encoded(size=size, fmt="JPEG"), "image/jpeg"))],
             timeout=600)
    assert r.status_code == 200, r.text
    pad_id = llm.model.config.vision.media_pad_id
    assert llm.tokenizer.encode(image_block(*size, pads), special=True).count(pad_id) == pads
    text_only = _ask(url, [{"type": "text", "text": "Describe it."}]).json()["usage"]["prompt_tokens"]
    block = len(llm.tokenizer.encode(image_block(*size, pads), special=True))
    assert r.json()["usage"]["prompt_tokens"] == text_only + block
