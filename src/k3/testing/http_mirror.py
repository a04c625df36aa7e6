"""A loopback HTTP mirror for download tests and benchmarks, with scripted faults: dropped connections,
wrong bytes, 500s, ignored Range headers, stalls, throttling and missing files. Counts what it serves."""

from __future__ import annotations

import base64
import hashlib
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote

RANGE = re.compile(r"bytes=(\d+)-(\d*)")


@dataclass
class Faults:
    drop_after: int | None = None      # close the connection after this many body bytes...
    drop_times: int = 0                # ...for this many responses
    fail_500_times: int = 0            # the first N requests answer 500
    ignore_range: bool = False         # answer 200 with the whole file
    corrupt: set[str] = field(default_factory=set)  # flip one byte in these files' bodies
    flip_data: set[str] = field(default_factory=set)  # flip one byte near the end (tensor data, not the header)
    advertise_sha256: bool = False     # send the true file's sha256 as Repr-Digest (as a mirror with metadata does)
    stall_after: int | None = None     # stop sending (but keep the socket open) after N bytes...
    stall_times: int = 0               # ...for this many responses
    stall_seconds: float = 5.0
    bytes_per_s: float | None = None   # throttle
    missing: set[str] = field(default_factory=set)
    no_validator: bool = False         # send neither ETag nor Last-Modified (a mirror that cannot say its version)
    endless: set[str] = field(default_factory=set)  # these files: a chunked body without end, no size announced


class QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        pass  # clients that hang up mid-response are part of the tests


class Mirror:
    def __init__(self, root: Path, faults: Faults | None = None):
        self.root, self.faults = Path(root), faults or Faults()
        self.lock = threading.Lock()
        self.requests: list[tuple[str, str | None, int]] = []  # (path, Range header, status)
        self.seen: list[tuple[str, str | None]] = []  # (the request's whole path, its Authorization header)
        self.bytes_served = 0
        self.server = QuietServer(("127.0.0.1", 0), self._handler())
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/repo/resolve/main/"

    def __enter__(self) -> "Mirror":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def take(self, attr: str) -> bool:
        """Consume one use of a counted fault."""
        with self.lock:
            n = getattr(self.faults, attr)
            if n > 0:
                setattr(self.faults, attr, n - 1)
                return True
            return False

    def _handler(self):
        mirror = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                mirror._serve(self)

        return Handler

    def _serve(self, h: BaseHTTPRequestHandler) -> None:
        self.seen.append((h.path, h.headers.get("Authorization")))
        name = unquote(h.path.split("/resolve/main/", 1)[-1])
        path = self.root / name
        rng = h.headers.get("Range")
        if self.take("fail_500_times"):
            return self._status(h, name, rng, 500)
        if name in self.faults.missing or not path.is_file() or ".." in name:
            return self._status(h, name, rng, 404)
        data = path.read_bytes()
        if name in self.faults.endless:
            return self._endless(h, name, rng)
        digest = base64.b64encode(hashlib.sha256(data).digest()).decode()
        etag = '"' + hashlib.sha256(data).hexdigest()[:32] + '"'   # a strong ETag of this version of the file
        if name in self.faults.corrupt and data:
            data = bytes([data[0]]) + bytes([data[1] ^ 0xFF]) + data[2:] if len(data) > 1 else bytes([data[0] ^ 1])
        if name in self.faults.flip_data and len(data) > 16:
            data = data[:-9] + bytes([data[-9] ^ 0x40]) + data[-8:]
        start, end, status = 0, len(data), 200
        m = RANGE.fullmatch(rng or "")
        if_range = h.headers.get("If-Range")
        if if_range is not None and (self.faults.no_validator or if_range != etag):
            m = None     # RFC 9110: a stale validator gets the whole (current) file
        if m and not self.faults.ignore_range:
            start, end, status = int(m.group(1)), (int(m.group(2)) + 1 if m.group(2) else len(data)), 206
            end = min(end, len(data))
        with self.lock:
            self.requests.append((name, rng, status))
        h.send_response(status)
        h.send_header("Content-Length", str(end - start))
        if not self.faults.no_validator:
            h.send_header("ETag", etag)
        if self.faults.advertise_sha256:
            h.send_header("Repr-Digest", f"sha-256=:{digest}:")
        if status == 206:
            h.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(data)}")
        h.end_headers()
        self._body(h, data[start:end])

    def _body(self, h: BaseHTTPRequestHandler, body: bytes) -> None:
        f = self.faults
        drop = f.drop_after if f.drop_after is not None and len(body) > f.drop_after and self.take("drop_times") else None
        stall = (f.stall_after if f.stall_after is not None and len(body) > f.stall_after and self.take("stall_times")
                 else None)
        pos, step = 0, 16 * 1024
        try:
            while pos < len(body):
                piece = body[pos:pos + step]
                if drop is not None and pos + len(piece) > drop:
                    h.wfile.write(body[pos:drop])
                    h.wfile.flush()
                    h.close_connection = True
                    h.connection.shutdown(2)
                    return
                if stall is not None and pos + len(piece) > stall:
                    h.wfile.write(body[pos:stall])
                    h.wfile.flush()
                    time.sleep(self.faults.stall_seconds)
                    h.close_connection = True
                    return
                h.wfile.write(piece)
                pos += len(piece)
                with self.lock:
                    self.bytes_served += len(piece)
                if self.faults.bytes_per_s:
                    time.sleep(len(piece) / self.faults.bytes_per_s)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _endless(self, h: BaseHTTPRequestHandler, name: str, rng: str | None) -> None:
        """200, chunked, no Content-Length, and bytes until the client hangs up."""
        with self.lock:
            self.requests.append((name, rng, 200))
        h.send_response(200)
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        piece = b"x" * 65536
        try:
            while True:
                h.wfile.write(b"%x\r\n" % len(piece) + piece + b"\r\n")
                with self.lock:
                    self.bytes_served += len(piece)
        except (BrokenPipeError, ConnectionResetError, OSError):
            h.close_connection = True

    def _status(self, h, name: str, rng: str | None, status: int) -> None:
        with self.lock:
            self.requests.append((name, rng, status))
        h.send_response(status)
        h.send_header("Content-Length", "0")
        h.end_headers()
