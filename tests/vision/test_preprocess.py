"""Preprocessing (vision spec §3): the resize rule on the spec's worked sizes, transparency, padding,
normalisation and patch order; and bad input refused by name, before it costs memory."""

from __future__ import annotations

import base64
import os
import struct
import zlib

import numpy as np
import pytest
import torch

from images_support import encoded
from k3.config.vision import MediaConfig, media_from_hf, media_to_hf
from k3.media import ImageError, ImageLimits, plan_resize, prepare_image
from k3.media.sources import from_data_url, image_bytes_or_object
from k3.media.transparency import background

WORKED = [((640, 480), (36, 46, 414)), ((1024, 768), (56, 74, 1036)), ((1920, 1080), (78, 138, 2691)),
          ((224, 224), (16, 16, 64)), ((28, 28), (2, 2, 1)), ((5, 3), (2, 2, 1)), ((7200, 50), (4, 512, 512)),
          ((3600, 3600), (258, 258, 16641)), ((3584, 3584), (256, 256, 16384))]


@pytest.mark.parametrize("size,grid", WORKED)
def test_the_resize_rule_on_the_spec_s_worked_sizes(size, grid):
    p = plan_resize(*size)
    assert (p.grid_h, p.grid_w, p.num_tokens) == grid
    assert p.width <= size[0] and p.height <= size[1]                 # never enlarged
    assert (p.width + p.pad_width) % 28 == 0 and (p.height + p.pad_height) % 28 == 0


def test_7200_by_50_is_cut_to_the_side_limit_by_truncation():
    p = plan_resize(7200, 50)
    assert (p.width, p.height) == (7168, 49)


def test_pixels_are_padded_with_minus_one_normalised_and_cut_row_major():
    """A 30x20 image of distinct colours: patch (r, c) holds pixels [14r:14r+14, 14c:14c+14], channel-major."""
    from PIL import Image

    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, (20, 30, 3), dtype=np.uint8)
    img = prepare_image(Image.fromarray(pixels, "RGB"))
    assert img.grid == (1, 2, 4) and img.num_tokens == 2 and (img.width, img.height) == (30, 20)
    grid = img.pixel_values.view(2, 4, 3, 14, 14)
    expected = torch.from_numpy(pixels).double() / 127.5 - 1
    assert torch.allclose(grid[0, 0].permute(1, 2, 0).double(), expected[:14, :14], atol=1e-6)
    assert torch.allclose(grid[1, 2].permute(1, 2, 0)[:6, :2].double(), expected[14:20, 28:30], atol=1e-6)
    assert (grid[1, 2].permute(1, 2, 0)[6:] == -1).all() and (grid[0, 3] == -1).all()   # the padding
    assert img.pixel_values.dtype == torch.float32 and img.pixel_values.abs().max() <= 1


def test_transparent_pixels_go_onto_the_chessboard_with_truncation():
    from PIL import Image

    img = Image.new("RGBA", (28, 28), (10, 200, 30, 128))
    out = prepare_image(img).pixel_values.view(2, 2, 3, 14, 14)
    a = np.float32(128) / np.float32(255)
    def want(c, g):
        return int(np.float32(a * c + (1 - a) * g)) / 127.5 - 1
    assert out[0, 0, 0, 0, 0].item() == pytest.approx(want(10, 255), abs=1e-6)     # (0, 0): white square
    assert out[0, 0, 0, 0, 8].item() == pytest.approx(want(10, 180), abs=1e-6)     # (8, 0): gray
    assert out[0, 0, 1, 8, 8].item() == pytest.approx(want(200, 255), abs=1e-6)    # (8, 8): white again
    board = background(MediaConfig(), 16, 16)
    assert board[0, 0, 0] == 255 and board[0, 8, 0] == 180 and board[8, 8, 0] == 255


def test_an_image_without_transparency_ignores_the_background():
    plain = prepare_image(encoded(mode="RGB", color=(9, 9, 9)))
    gray_l = prepare_image(encoded(mode="L", color=9))
    assert torch.equal(plain.pixel_values, gray_l.pixel_values)


def test_the_media_config_reads_the_official_keys():
    raw = {"media_proc_cfg": {"patch_size": 14, "merge_kernel_size": 2, "in_patch_limit": 4096,
                              "patch_limit_on_one_side": 64, "image_mean": [0.5] * 3, "image_std": [0.5] * 3,
                              "transparent_bg_config": {"pattern": "chessboard", "chessboard_square_size": 8,
                                                        "chessboard_square_on_top_left": True,
                                                        "chessboard_white_value": 255, "chessboard_gray_value": 180},
                              "transparent_bg_fill_stage": "after_resize"}}
    m = media_from_hf(raw)
    assert (m.in_patch_limit, m.chessboard_square, m.gray, m.fill_after_resize) == (4096, 8, 180, True)
    assert media_from_hf(media_to_hf(m)) == m
    assert media_from_hf({"media_proc_cfg": {}}).background is None      # no config: alpha dropped
    assert plan_resize(1920, 1080, m).num_tokens < plan_resize(1920, 1080).num_tokens


def test_the_digest_follows_the_pixels():
    a, b = encoded(noise=1), encoded(noise=2)
    assert prepare_image(a).digest == prepare_image(a).digest != prepare_image(b).digest


def _png_claiming(width: int, height: int) -> bytes:
    """A PNG whose header claims width x height (its data is one row): a decompression bomb's shape."""
    good = encoded(size=(1, 1))
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    chunk = b"IHDR" + ihdr
    return good[:8] + struct.pack(">I", 13) + chunk + struct.pack(">I", zlib.crc32(chunk)) + good[33:]


@pytest.mark.parametrize("data,message", [
    (b"not an image at all", "corrupt, truncated or not an image"),
    (encoded(size=(200, 200), noise=3)[:300], "corrupt, truncated"),
    (encoded(fmt="GIF"), "GIF images are not accepted"),
    (encoded(fmt="BMP"), "BMP images are not accepted"),
    (_png_claiming(200_000, 200_000), "claims more than 80,000,000 pixels"),
    (_png_claiming(12_000, 12_000), "claims more than 80,000,000 pixels"),
])
def test_bad_images_are_refused_by_name(data, message):
    with pytest.raises(ImageError, match=message):
        prepare_image(data)


def test_limits_hold_before_decoding():
    with pytest.raises(ImageError, match="bytes, over the limit"):
        prepare_image(encoded(noise=4), limits=ImageLimits(max_bytes=100))
    with pytest.raises(ImageError, match="over the limit of 100"):
        prepare_image(encoded(size=(20, 20)), limits=ImageLimits(max_pixels=100))


def test_jpeg_and_webp_are_read():
    for fmt in ("JPEG", "WEBP"):
        assert prepare_image(encoded(fmt=fmt)).grid == (1, 4, 6)


def test_sources_data_urls_and_local_files(tmp_path):
    png = encoded()
    url = "data:image/png;base64," + base64.b64encode(png).decode()
    assert from_data_url(url) == png
    for bad, message in [("data:text/plain;base64,aGk=", "not an image"), ("data:image/png,abc", "not base64"),
                         ("data:image/png;base64,@@@", "invalid base64"), ("data:image/svg+xml;base64,PHN2Zz4=", "svg")]:
        with pytest.raises(ImageError, match=message):
            from_data_url(bad)
    with pytest.raises(ImageError, match="does not fetch"):
        image_bytes_or_object("https://example.com/cat.png")
    (tmp_path / "ok").mkdir()
    (tmp_path / "ok" / "a.png").write_bytes(png)
    (tmp_path / "secret.png").write_bytes(png)
    (tmp_path / "ok" / "link.png").symlink_to(tmp_path / "secret.png")
    found = image_bytes_or_object(str(tmp_path / "ok" / "a.png"), local_root=tmp_path / "ok")
    assert os.fspath(found) == str(tmp_path / "ok" / "a.png") and found.shown == str(tmp_path / "ok" / "a.png")
    assert os.path.isfile(image_bytes_or_object("file://" + str(tmp_path / "ok" / "a.png"), local_root=tmp_path / "ok"))
    for outside in (str(tmp_path / "secret.png"), str(tmp_path / "ok" / ".." / "secret.png"), str(tmp_path / "ok" / "link.png")):
        with pytest.raises(ImageError, match="outside the directory"):
            image_bytes_or_object(outside, local_root=tmp_path / "ok")
    with pytest.raises(ImageError, match="does not read local image files"):
        image_bytes_or_object(str(tmp_path / "ok" / "a.png"))
