"""One HTTP range request against one mirror, streamed into a sink. Every failure becomes a
`FetchError` that says whether retrying (here or on another mirror) can help."""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import quote

import httpx

from k3.tools.download.ratelimit import RateLimit

CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")
SHA256_ETAG = re.compile(r'^(?:W/)?"?([0-9a-f]{64})"?$')
READ_BLOCK = 1 << 20
# A body whose size no header announced is cut here: only small files (config.json, tiktoken.model) come
# without a size, and a mirror streaming an endless body must not fill the disk.
MAX_UNSIZED_BYTES = 64 << 20


class FetchError(Exception):
    def __init__(self, message: str, *, retryable: bool = True, not_found: bool = False):
        super().__init__(message)
        self.retryable, self.not_found = retryable, not_found


@dataclass(frozen=True)
class Probe:
    size: int | None
    sha256: str | None  # advertised by the mirror (see advertised_sha256)
    validator: str | None = None   # a strong ETag or Last-Modified: which version of the file this is


def validator_of(headers) -> str | None:
    """What identifies this version of the file for If-Range: a strong ETag, else Last-Modified."""
    etag = headers.get("etag", "")
    if etag and not etag.startswith("W/"):
        return etag
    return headers.get("last-modified") or None


DIGEST_SHA256 = re.compile(r"sha-256=:?([A-Za-z0-9+/=]{43,44}):?", re.IGNORECASE)


def advertised_sha256(headers) -> str | None:
    """A whole-file sha256 a mirror states: Hugging Face's X-Linked-ETag (the LFS object id), RFC 9530's
    Repr-Digest or RFC 3230's Digest (sha-256, base64), S3's x-amz-checksum-sha256 (base64)."""
    m = SHA256_ETAG.match(headers.get("x-linked-etag", ""))
    if m:
        return m.group(1)
    for value in (headers.get("repr-digest", ""), headers.get("digest", "")):
        m = DIGEST_SHA256.search(value)
        if m:
            return _b64_hex(m.group(1))
    return _b64_hex(headers.get("x-amz-checksum-sha256", ""))


def _b64_hex(value: str) -> str | None:
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return None
    return raw.hex() if len(raw) == 32 else None


def url_for(base: str, name: str) -> str:
    return base.rstrip("/") + "/" + quote(name)


def _status_error(r: httpx.Response, url: str) -> FetchError:
    if r.status_code in (404, 410):
        return FetchError(f"{url}: HTTP {r.status_code} (not on this mirror)", retryable=False, not_found=True)
    if r.status_code in (401, 403):
        return FetchError(f"{url}: HTTP {r.status_code} (access denied; pass --token if the mirror needs one)",
                          retryable=False)
    return FetchError(f"{url}: HTTP {r.status_code}")


def probe(client: httpx.Client, base: str, name: str) -> Probe:
    """Size (and sha256 when the mirror advertises it) from a one-byte ranged GET."""
    url = url_for(base, name)
    try:
        with client.stream("GET", url, headers={"Range": "bytes=0-0"}) as r:
            if r.status_code not in (200, 206):
                raise _status_error(r, url)
            # A digest of the whole file (not of this one-byte range: Content-Digest is not used).
            sha = next((d for resp in (*r.history, r) if (d := advertised_sha256(resp.headers))), None)
            if r.status_code == 206:
                m = CONTENT_RANGE.match(r.headers.get("content-range", ""))
                size = int(m.group(3)) if m and m.group(3) != "*" else None
            else:
                size = int(r.headers["content-length"]) if "content-length" in r.headers else None
            return Probe(size, sha, validator_of(r.headers))
    except httpx.HTTPError as e:
        raise FetchError(f"{url}: {type(e).__name__}: {e}") from None


class Changed(FetchError):
    """The file on the mirror is not the version the download started with (If-Range said so)."""

    def __init__(self, message: str):
        super().__init__(message, retryable=False)


def fetch(client: httpx.Client, base: str, name: str, start: int, end: int | None, size: int | None,
          sink: Callable[[int, bytes], None], limit: RateLimit, validator: str | None = None) -> tuple[int, int]:
    """GET bytes [start, end) of `name`, calling sink(offset, data) as they arrive.

    Returns (first, last) byte offsets actually written: a server that ignores Range sends the whole
    file, which is written from offset 0. With `validator` (the version the download began with) a
    ranged request carries If-Range, and a whole-file answer to it means the file changed: Changed,
    since writing it beside chunks of the old version would mix two files. A body of unannounced
    size stops at MAX_UNSIZED_BYTES. Raises FetchError; bytes already passed to the sink stay valid,
    and `FetchError.args` carries no position - the caller tracks it through the sink."""
    url = url_for(base, name)
    headers = {"Range": f"bytes={start}-{end - 1}"} if end is not None else {}
    if headers and validator:
        headers["If-Range"] = validator
    try:
        with client.stream("GET", url, headers=headers) as r:
            if r.status_code == 206:
                _check_content_range(r, url, start, end, size)
                pos = start
            elif r.status_code == 200:
                if "If-Range" in headers and validator_of(r.headers) != validator:   # same version: Range ignored
                    raise Changed(f"{url}: the file changed on the mirror since this download began (If-Range "
                                  "answered with the whole file); run k3 download again to start it over")
                length = r.headers.get("content-length")
                if size is not None and length is not None and int(length) != size:
                    raise FetchError(f"{url}: {length} bytes but the file is {size} (mirror out of date?)",
                                     retryable=False)
                pos = 0
            else:
                raise _status_error(r, url)
            first, stop = pos, (end if r.status_code == 206 else size)
            if stop is None and r.headers.get("content-length", "").isdigit():
                stop = int(r.headers["content-length"])
            for data in r.iter_raw(READ_BLOCK):
                if stop is None and pos + len(data) > MAX_UNSIZED_BYTES:
                    raise FetchError(f"{url}: over {MAX_UNSIZED_BYTES >> 20} MiB without an announced size; a "
                                     f"file k3 fetches without a size is small (is the mirror broken?)", retryable=False)
                if stop is not None and pos + len(data) > stop:
                    data = data[: stop - pos]  # never write past what was asked for
                limit.take(len(data))
                sink(pos, data)
                pos += len(data)
                if stop is not None and pos >= stop:
                    break
            return first, pos
    except httpx.HTTPError as e:
        raise FetchError(f"{url}: {type(e).__name__}: {e or 'connection lost'}") from None


def _check_content_range(r: httpx.Response, url: str, start: int, end: int | None, size: int | None) -> None:
    m = CONTENT_RANGE.match(r.headers.get("content-range", ""))
    if not m or int(m.group(1)) != start or (end is not None and int(m.group(2)) != end - 1):
        raise FetchError(f"{url}: asked for bytes {start}-{end}, got Content-Range "
                         f"{r.headers.get('content-range')!r}", retryable=False)
    if size is not None and m.group(3) != "*" and int(m.group(3)) != size:
        raise FetchError(f"{url}: the mirror's file is {m.group(3)} bytes, expected {size} (mirror out of date?)",
                         retryable=False)
