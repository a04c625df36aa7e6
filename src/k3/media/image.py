"""One image, from whatever a user holds (bytes, a file, a PIL image) to the tower's input (vision spec §3.2):
decode under limits, resize (bicubic, in the image's own mode), put transparent pixels on the configured
background, pad with zeros, normalise to [-1, 1], cut into 14x14 patches in row-major order.

Limits hold before any pixel is decoded: the encoded size, and width x height read from the header (a
decompression bomb is refused by its header, never decoded). EXIF orientation is not applied, as the
reference does not apply it.
"""

from __future__ import annotations

import hashlib
import io
import os
import stat
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from k3.config.vision import MediaConfig
from k3.media.errors import ImageError
from k3.media.prompt import image_block
from k3.media.resize import plan_resize
from k3.media.transparency import composite

FORMATS = ("PNG", "JPEG", "WEBP")


@dataclass(frozen=True)
class ImageLimits:
    max_bytes: int = 32 * 2 ** 20             # the encoded file
    max_pixels: int = 80_000_000              # width x height as the header states it (7168 x 7168 is 51 M; under
                                              # Pillow's own bomb threshold, so this limit is the one that speaks)
    max_images: int = 16                      # in one prompt
    max_image_tokens: int = 65_536            # image rows (pad tokens) in one prompt, all images together: four
                                              # images at the released processor's largest (16,384 each)


@dataclass(frozen=True, eq=False)
class PreparedImage:
    pixel_values: torch.Tensor     # [h * w, 3, p, p] float32 in [-1, 1]
    grid: tuple[int, int, int]     # (t, h, w) patches: t = 1 for an image
    width: int                     # the upload's size, which the prompt states
    height: int
    num_tokens: int                # the rows it becomes, and the `<|media_pad|>` tokens it takes
    digest: str                    # sha256 of the size and pixels: the prefix cache keys on it
    rows: torch.Tensor | None = None   # the tower's output, when it ran ahead of the engine (a server's image pool)

    @property
    def block(self) -> str:
        """Its text in a prompt (k3.media.prompt.image_block)."""
        return image_block(self.width, self.height, self.num_tokens)


def prepare_image(source, media: MediaConfig = MediaConfig(), limits: ImageLimits = ImageLimits()) -> PreparedImage:
    """source: bytes, a path, or a PIL image -> PreparedImage. Bad input raises ImageError."""
    img = _open(source, limits, media)
    width, height = img.size
    plan = plan_resize(width, height, media)
    try:
        if not media.fill_after_resize:
            img = composite(img, media)
        img = _resize(img, (plan.width, plan.height))
        img = composite(img, media)
    except (OSError, ValueError) as e:
        raise ImageError(f"the image could not be decoded ({e}); send an intact PNG, JPEG or WebP file") from None
    except MemoryError:
        raise ImageError(f"the image ({width}x{height}) is too large to resize here; send a smaller image") from None
    rgb = np.asarray(img, dtype=np.uint8)
    padded = np.pad(rgb, ((0, plan.pad_height), (0, plan.pad_width), (0, 0)))
    p, h, w = media.patch_size, plan.grid_h, plan.grid_w
    x = torch.from_numpy(padded).to(torch.float64).div(255.0).float()          # (u8 / 255) in float64, then fp32
    x = (x - torch.tensor(media.image_mean)) * (1.0 / torch.tensor(media.image_std, dtype=torch.float64)).float()
    patches = x.view(h, p, w, p, 3).permute(0, 2, 4, 1, 3).reshape(h * w, 3, p, p).contiguous()
    digest = hashlib.sha256(f"{width}x{height}|{h}x{w}|".encode() + padded.tobytes()).hexdigest()
    return PreparedImage(patches, (1, h, w), width, height, plan.num_tokens, digest)


def measure(source, media: MediaConfig = MediaConfig(), limits: ImageLimits = ImageLimits()):
    """(the source as bytes or a PIL image, its width, height and image tokens) from the header alone, every
    limit a header can answer checked: no pixel is decoded, so a request's images are bounded before any
    of them costs work."""
    source = _read_path(source, limits)
    img = _open(source, limits, media, load=False)
    width, height = img.size
    return source, width, height, plan_resize(width, height, media).num_tokens


def stack_images(images: list[PreparedImage]) -> tuple[torch.Tensor, torch.Tensor]:
    """Several images -> (pixel_values [sum h*w, 3, p, p], grid_thw [n, 3] int64) for `model.encode_images`."""
    return (torch.cat([i.pixel_values for i in images]),
            torch.tensor([list(i.grid) for i in images], dtype=torch.long))


def _pil():
    try:
        from PIL import Image
    except ImportError:
        raise ImageError("image input needs Pillow: pip install 'k3[vision]'") from None
    return Image


def _open(source, limits: ImageLimits, media: MediaConfig = MediaConfig(), load: bool = True):
    Image = _pil()
    if isinstance(source, Image.Image):
        _check_pixels(source.size, limits)
        _check_resize(source.size, media)
        return source
    source = _read_path(source, limits)
    if not isinstance(source, (bytes, bytearray, memoryview)):
        raise ImageError(f"an image is bytes, a file path or a PIL image, not {type(source).__name__}")
    if len(source) > limits.max_bytes:
        raise ImageError(f"the image is {len(source):,} bytes, over the limit of {limits.max_bytes:,}; send a smaller file")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            img = Image.open(io.BytesIO(bytes(source)))
            if img.format not in FORMATS:
                raise ImageError(f"{img.format or 'this'} images are not accepted; send PNG, JPEG or WebP")
            _check_pixels(img.size, limits)
            _check_resize(img.size, media)
            if load:
                img.load()
    except ImageError:
        raise
    except (Image.DecompressionBombWarning, Image.DecompressionBombError):
        raise ImageError(f"the image's header claims more than {limits.max_pixels:,} pixels; send a smaller image") from None
    except (OSError, SyntaxError, ValueError, Image.UnidentifiedImageError) as e:
        raise ImageError(f"the image is corrupt, truncated or not an image ({type(e).__name__}: {e}); "
                         "send an intact PNG, JPEG or WebP file") from None
    return img


def _read_path(source, limits: ImageLimits):
    """A path's bytes (sources.LocalFile keeps the name its request gave); anything else as it is."""
    if isinstance(source, (str, os.PathLike)):
        return _read_file(source if hasattr(source, "shown") else Path(source), limits)
    return source


def _read_file(path, limits: ImageLimits) -> bytes:
    """A regular file's bytes, named in errors as its reader gave it (`path.shown`, sources.LocalFile: a
    server's own directory never appears in a reply). Opened without blocking and checked to be a regular
    file before reading: a FIFO or a device would hang the reader."""
    shown = getattr(path, "shown", str(path))
    try:
        fd = os.open(os.fspath(path), os.O_RDONLY | os.O_NONBLOCK)
    except OSError as e:
        raise ImageError(f"cannot read the image file {shown}: {e.strerror or e}") from None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ImageError(f"{shown} is not a regular file; send an image file")
        if info.st_size > limits.max_bytes:
            raise ImageError(f"{shown} is {info.st_size:,} bytes, over the limit of {limits.max_bytes:,}")
        return f.read(limits.max_bytes + 1)


def _check_pixels(size: tuple[int, int], limits: ImageLimits) -> None:
    w, h = size
    if w < 1 or h < 1:
        raise ImageError(f"the image is {w}x{h}: it has no pixels")
    if w * h > limits.max_pixels:
        raise ImageError(f"the image is {w}x{h} = {w * h:,} pixels, over the limit of {limits.max_pixels:,}; "
                         "send a smaller image (K3 sees at most 7168 pixels a side after its own resize)")


# Bytes of bicubic filter weights Pillow may build for one resize: a window of about 4 x (input / output) taps
# for each output pixel of an axis, in doubles. A 1 x 79,000,000 strip shrunk to 7,168 would need ~2.5 GB.
MAX_RESIZE_WEIGHTS = 256 << 20


def _check_resize(size: tuple[int, int], media: MediaConfig) -> None:
    plan = plan_resize(*size, media)
    for axis, (before, after) in enumerate(zip(size, (plan.width, plan.height))):
        weights = after * (4 * before / after + 2) * 8
        if weights > MAX_RESIZE_WEIGHTS:
            raise ImageError(f"the image is {size[0]}x{size[1]}: its {'width' if axis == 0 else 'height'} would "
                             f"shrink {before / after:,.0f}-fold, more than a resize can take here; send an image "
                             "with a less extreme aspect ratio")


def _resize(img, size: tuple[int, int]):
    """PIL bicubic in the image's own mode (PIL itself takes nearest for palette images), as the reference;
    a mode bicubic cannot resample is widened first."""
    if img.size == size:
        return img.copy()
    Image = _pil()
    try:
        return img.resize(size, resample=Image.Resampling.BICUBIC)
    except ValueError:
        wide = img.convert("RGBA" if "A" in img.getbands() or "transparency" in img.info else "RGB")
        return wide.resize(size, resample=Image.Resampling.BICUBIC)
