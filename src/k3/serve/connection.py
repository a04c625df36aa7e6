"""The server's connections: uvicorn as k3 runs it, with the limits uvicorn leaves open.

- A request's head (request line and headers) must arrive within HEAD_TIMEOUT_S of the connection
  opening or of the previous response: uvicorn's h11 protocol waits for it forever, so a client
  sending a byte every half second held a connection (and a slot of the server) indefinitely.
  The body has its own read timeout in guard.py.
- A forced shut-down (a second Ctrl-C) logs no CancelledError tracebacks (QuietCancel).
- The access log never shows an API key: `?api_key=` (the chat page's way to send it) is redacted
  before the line is written.
"""

from __future__ import annotations

import asyncio
import logging
import re

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

HEAD_TIMEOUT_S = 20.0
SECRET_QUERY = re.compile(r"(?i)((?:^|[?&])api_key=)[^&\s]*")


class HeadTimeoutProtocol(H11Protocol):
    """uvicorn's h11 protocol, closing a connection whose request head does not arrive in time."""

    head_timeout_s = HEAD_TIMEOUT_S

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._head_timer = None
        self._arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state is h11.IDLE:
            self._arm()                      # a head still arriving (or the next one, on a kept-alive connection)
        else:
            self._disarm()

    def connection_lost(self, exc) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(self.head_timeout_s, self._head_timeout)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timeout(self) -> None:
        self._head_timer = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.logger.warning("closed a connection whose request head did not arrive within %g s", self.head_timeout_s)
            self.transport.close()


class RedactKeys(logging.Filter):
    """Replaces the value of `api_key=` in an access-log line's path."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(SECRET_QUERY.sub(r"\1<redacted>", a) if isinstance(a, str) else a for a in record.args)
        return True


class QuietCancel(logging.Filter):
    """Drops the tracebacks uvicorn logs for tasks it cancels itself (a second Ctrl-C forces shut-down:
    the lifespan and the requests in flight end with CancelledError). The user asked for that; it is not
    an error to show."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        # starlette reports its lifespan's cancellation as the traceback's text, not as exc_info
        text = record.msg if isinstance(record.msg, str) else ""
        told = text.startswith("Traceback") and text.rstrip().endswith("CancelledError")
        return not (isinstance(exc, asyncio.CancelledError) or told)


def config(app, shutdown_timeout: float = 30.0, **kwargs) -> uvicorn.Config:
    """uvicorn's Config as k3 serves: the head timeout's protocol, keys redacted from the access log."""
    kwargs.setdefault("log_level", "info")
    cfg = uvicorn.Config(app, timeout_graceful_shutdown=shutdown_timeout, http=HeadTimeoutProtocol, **kwargs)
    access = logging.getLogger("uvicorn.access")   # after Config, which configures logging; once a process
    if not any(isinstance(f, RedactKeys) for f in access.filters):
        access.addFilter(RedactKeys())
    errors = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, QuietCancel) for f in errors.filters):
        errors.addFilter(QuietCancel())
    return cfg
