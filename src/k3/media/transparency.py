"""Transparent pixels onto the configured background (vision spec §3.2 step 1; `transparent_bg_config`).

An RGB image is returned as it is; one with neither an alpha band nor palette transparency is converted
to RGB; otherwise RGB = trunc(a * C + (1 - a) * G) in float32 with a = alpha / 255, G the background
(a chessboard by default: gray where floor(x / s) + floor(y / s) is odd when the top-left square is
white). With no background configured, alpha is dropped.
"""

from __future__ import annotations

import numpy as np

from k3.config.vision import MediaConfig

FLAT = {"white": 255, "black": 0, "gray": 128}


def composite(img, m: MediaConfig):
    from PIL import Image

    if m.background is None or img.mode == "RGB":
        return img if img.mode == "RGB" else img.convert("RGB")
    if "A" not in img.getbands() and "transparency" not in img.info:
        return img.convert("RGB")
    rgba = np.asarray(img.convert("RGBA"))
    alpha = (rgba[..., 3].astype(np.float32) / np.float32(255.0))[..., None]
    out = alpha * rgba[..., :3] + (np.float32(1.0) - alpha) * background(m, *rgba.shape[:2])
    return Image.fromarray(out.astype(np.uint8), "RGB")


def background(m: MediaConfig, height: int, width: int) -> np.ndarray:
    """[height, width, 3] uint8."""
    if m.background in FLAT:
        return np.full((height, width, 3), FLAT[m.background], dtype=np.uint8)
    s = m.chessboard_square
    parity = (np.arange(height)[:, None] // s + np.arange(width)[None, :] // s) % 2
    gray_where = parity == (1 if m.white_top_left else 0)
    board = np.where(gray_where, np.uint8(m.gray), np.uint8(m.white)).astype(np.uint8)
    return np.repeat(board[..., None], 3, axis=2)
