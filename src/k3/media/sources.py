"""Where an image comes from: bytes, a PIL image, a `data:` URL, or a local file. k3 never fetches a URL
from the network; a server reads local files only under a directory its operator names
(`--allowed-local-media-path`, vLLM's flag), so a request cannot read the server's files."""

from __future__ import annotations

import base64
import binascii
import os
from pathlib import Path
from urllib.parse import unquote, urlparse

from k3.media.errors import ImageError

REMOTE = ("http://", "https://", "ftp://", "s3://", "gs://")


def image_bytes_or_object(source, *, local_root: str | Path | None = None, trusted: bool = False):
    """A source -> bytes (or the PIL image itself). trusted=True (Python callers) reads any local path;
    a server passes trusted=False and its `local_root` (None: no local files at all)."""
    if isinstance(source, (bytes, bytearray, memoryview)) or type(source).__module__.startswith("PIL."):
        return source
    if isinstance(source, os.PathLike):
        source = os.fspath(source)
    if not isinstance(source, str):
        raise ImageError(f"an image is a data: URL, a file path, bytes or a PIL image, not {type(source).__name__}")
    scheme = source[:8].lower()
    if scheme.startswith("data:"):
        return from_data_url(source)
    if scheme.startswith(REMOTE):
        raise ImageError("k3 does not fetch images from the network; send the image inline as a "
                         "data:image/...;base64,... URL")
    path = Path(unquote(urlparse(source).path)) if scheme.startswith("file:") else Path(source)
    if trusted:
        return path
    return _under(path, local_root)


def from_data_url(url: str, max_chars: int = 48 * 2 ** 20) -> bytes:
    """`data:image/png;base64,....` -> the bytes. Only base64 image data is taken."""
    if len(url) > max_chars:
        raise ImageError(f"the data: URL is {len(url):,} characters, over the limit of {max_chars:,}")
    head, sep, body = url.partition(",")
    mime = head[5:].split(";")[0].strip().lower()
    if not sep or not mime.startswith("image/"):
        raise ImageError(f"a data: URL of type {mime or 'none'!r} is not an image; send data:image/png;base64,... "
                         "(PNG, JPEG or WebP)")
    if mime in ("image/svg+xml", "image/gif", "image/bmp", "image/tiff"):
        raise ImageError(f"{mime} images are not accepted; send PNG, JPEG or WebP")
    if ";base64" not in head.lower():
        raise ImageError("the image data: URL is not base64-encoded; send data:image/...;base64,...")
    try:
        return base64.b64decode(body, validate=True)
    except (binascii.Error, ValueError):
        raise ImageError("the image data: URL holds invalid base64") from None


def _under(path: Path, root) -> Path:
    if root is None:
        raise ImageError("this server does not read local image files; send the image as a data: URL (the "
                         "operator may allow a directory with --allowed-local-media-path)")
    base = Path(root).resolve()
    resolved = (base / path).resolve() if not path.is_absolute() else path.resolve()
    if resolved != base and base not in resolved.parents:
        raise ImageError(f"{path} is outside the directory this server reads images from")
    return LocalFile(resolved, str(path))


class LocalFile(os.PathLike):
    """A file under a server's media directory, named in errors as the request named it (`shown`)."""

    def __init__(self, path: Path, shown: str):
        self.path, self.shown = path, shown

    def __fspath__(self) -> str:
        return str(self.path)
