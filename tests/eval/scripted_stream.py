"""A streaming OpenAI-compatible chat endpoint on loopback with a known latency: the first chunk after
`first` seconds, then one chunk of text every `gap` seconds, answering every request with reply(messages).
The stand-in for a deployment whose speed a check must measure."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler

from scripted_server import on_loopback


@contextmanager
def streaming_endpoint(reply, first: float, gap: float, model: str = "scripted", serial: bool = False,
                       drop_after: int | None = None):
    """serial=True answers one request at a time, as one engine slot would: waiting requests queue, so TTFT
    grows with the load (a known knee). drop_after=N: from the N+1th request on, the connection drops in
    the middle of the stream (a server that dies mid-run)."""
    one_at_a_time = threading.Lock() if serial else contextlib.nullcontext()
    served = [0]

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_GET(self):
            data = json.dumps({"object": "list", "data": [{"id": model, "object": "model"}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with one_at_a_time:
                self._answer(body)

        def _answer(self, body: dict) -> None:
            words = reply(body["messages"]).split(" ")
            served[0] += 1
            dropping = drop_after is not None and served[0] > drop_after
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            time.sleep(first)
            for i, word in enumerate(words):
                if i:
                    time.sleep(gap)
                delta = {"role": "assistant", "content": word} if i == 0 else {"content": " " + word}
                self._event({"choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
                if dropping:
                    self.connection.shutdown(2)      # the connection drops mid-answer
                    return
            self._event({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
            self._event({"choices": [], "usage": {"prompt_tokens": 11, "completion_tokens": len(words),
                                                  "total_tokens": 11 + len(words)}})
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()

        def _event(self, chunk: dict) -> None:
            self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            self.wfile.flush()

    with on_loopback(Handler) as url:
        yield url
