"""The server's front door, as plain ASGI middleware (it must see the body's bytes as they arrive).

- Body size: at most the server's max_request_bytes (MAX_BODY_BYTES for text; images inline as data: URLs
  need more), counted over the bytes actually received, so a chunked body without Content-Length is cut at
  the limit too (413), never read whole.
- Body time: the whole body within BODY_TIMEOUT_S (408), so a client trickling it cannot hold a slot.
- API key: with --api-key every path needs `Authorization: Bearer KEY` (that scheme exactly) except /health (a liveness
  probe carries no data); /metrics too unless the server was started with --public-metrics. The chat
  page (GET /) also takes the key as `?api_key=` because a browser cannot send a header for it.
- Metrics: requests counted by path and status.
"""

from __future__ import annotations

import hmac
import asyncio
from urllib.parse import parse_qs

from k3.serve.protocol import error_response

MAX_BODY_BYTES = 4 * 2 ** 20
MAX_BODY_BYTES_WITH_IMAGES = 64 * 2 ** 20
BODY_TIMEOUT_S = 60.0   # the whole body, however it is chunked (the head's timeout is connection.py's)


class BodyTimeout(Exception):
    pass
OPEN_PATHS = ("/health",)
KNOWN_PATHS = ("/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/models", "/health", "/metrics", "/tokenize",
               "/detokenize", "/", "/openapi.json", "/version", "/tokenizer_info")


class Guard:
    def __init__(self, app, server):
        self.app, self.server = app, server

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        status = []

        async def send_counted(message):
            if message["type"] == "http.response.start":
                status.append(message["status"])
            await send(message)

        try:
            await self._guarded(scope, receive, send_counted)
        finally:
            path = scope["path"] if scope["path"] in KNOWN_PATHS else "other"
            self.server.metrics.requests.labels(path, str(status[0] if status else 499)).inc()

    async def _guarded(self, scope, receive, send):
        if not self._authorized(scope):
            return await error_response(401, "missing or wrong API key (send Authorization: Bearer KEY)")(
                scope, receive, send)
        declared, limit = _header(scope, b"content-length"), self.server.max_request_bytes
        if declared is not None and declared.isdigit() and int(declared) > limit:
            return await _too_large(limit)(scope, receive, send)
        try:
            body, ended = await _read_body(receive, limit)
        except BodyTimeout:
            return await error_response(408, f"the request body did not arrive within {BODY_TIMEOUT_S:g} s")(
                scope, receive, send)
        if body is None:
            return await _too_large(limit)(scope, receive, send)
        replay = [{"type": "http.request", "body": body, "more_body": False}] if not ended else []

        async def replayed():
            return replay.pop() if replay else await receive()

        await self.app(scope, replayed, send)

    def _authorized(self, scope) -> bool:
        key = self.server.api_key
        if not key or scope["path"] in OPEN_PATHS or (scope["path"] == "/metrics" and self.server.public_metrics):
            return True
        scheme, _, given = (_header(scope, b"authorization") or "").partition(" ")
        given = given.strip() if scheme.lower() == "bearer" else ""   # exactly `Bearer KEY`, never a bare key
        if not given and scope["path"] == "/" and scope["method"] == "GET":
            given = (parse_qs(scope.get("query_string", b"").decode()).get("api_key") or [""])[0]
        return hmac.compare_digest(given.encode(), key.encode())


async def _read_body(receive, limit: int) -> tuple[bytes | None, bool]:
    """-> (the whole body, or None past the limit; whether the client disconnected while sending it).
    BodyTimeout when the body does not arrive within BODY_TIMEOUT_S."""
    chunks, size = [], 0
    deadline = asyncio.get_running_loop().time() + BODY_TIMEOUT_S
    while True:
        try:
            message = await asyncio.wait_for(receive(), max(0.0, deadline - asyncio.get_running_loop().time()))
        except asyncio.TimeoutError:
            raise BodyTimeout() from None
        if message["type"] == "http.disconnect":
            return b"".join(chunks), True
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None, False
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks), False


def _too_large(limit: int):
    return error_response(413, f"request body over {limit} bytes")


def _header(scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return value.decode("latin-1")
    return None
