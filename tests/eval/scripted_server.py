"""An OpenAI-compatible endpoint on loopback that answers every chat request with reply(messages): a stand-in
for a hosted model with a known behaviour (always refusing, always grading the same way). reply may return
the text, (text, finish_reason) for an answer a server stopped (length, content_filter), or a message dict
({"content", "tool_calls"}) for an agent's tool calls."""

from __future__ import annotations

import json
import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@contextmanager
def scripted_endpoint(reply, model: str = "scripted", seen: list | None = None, drop_after: int | None = None):
    """seen: a list the request bodies are appended to (what a client sent); drop_after=N: from the N+1th
    chat request on, the connection is closed without an answer (a server that dies mid-run)."""
    seen = [] if seen is None else seen

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _send(self, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            self._send({"object": "list", "data": [{"id": model, "object": "model", "created": 0, "owned_by": "test"}]})

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append(body)
            if drop_after is not None and len(seen) > drop_after:
                self.close_connection = True
                self.connection.shutdown(2)
                return
            text = reply(body["messages"])
            if isinstance(text, dict):             # a whole message: tool calls
                message, finish = {"role": "assistant", **text}, "tool_calls" if text.get("tool_calls") else "stop"
            else:
                text, finish = text if isinstance(text, tuple) else (text, "stop")
                message = {"role": "assistant", "content": text}
            self._send({"id": "c1", "object": "chat.completion", "created": 0, "model": model,
                        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                        "usage": {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12}})

    with on_loopback(Handler) as url:
        yield url


@contextmanager
def on_loopback(handler):
    """A threading HTTP server with `handler` on a free loopback port, for the block; yields its /v1 URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/v1"
    finally:
        server.shutdown()
        server.server_close()
