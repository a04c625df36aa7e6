"""A loopback OpenAI-style server whose streams follow scripts: delays before and between chunks,
reasoning then content, HTTP errors, malformed chunks, stalls and unterminated streams."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Script:
    first_delay: float = 0.2
    gap: float = 0.05
    reasoning: int = 0          # chunks of reasoning_content before the answer
    content: int = 4            # answer chunks
    status: int = 200
    malformed_at: int | None = None  # chunk index replaced by invalid JSON
    stall: float = 0.0          # sleep this long before the first chunk (past the client timeout)
    no_done: bool = False       # end the stream without [DONE]
    usage: bool = True
    prompt_tokens: int = 17


@dataclass
class FakeOpenAI:
    scripts: list[Script]
    served: list[dict] = field(default_factory=list)

    def __post_init__(self):
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()

    def next_script(self, body: dict) -> Script:
        with self.lock:
            self.served.append(body)
            return self.scripts[(len(self.served) - 1) % len(self.scripts)]

    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                body = json.dumps({"data": [{"id": "fake-k3"}]}).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.stream(self, fake.next_script(body), body)

        return Handler

    def stream(self, h, s: Script, body: dict) -> None:
        if s.status != 200:
            h.send_response(s.status)
            h.send_header("Content-Length", "5")
            h.end_headers()
            h.wfile.write(b"oops!")
            return
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream")
        h.end_headers()
        try:
            time.sleep(s.stall or s.first_delay)
            for i in range(s.reasoning + s.content):
                if i:
                    time.sleep(s.gap)
                key = "reasoning_content" if i < s.reasoning else "content"
                chunk = ({"choices": [{"index": 0, "text": f"t{i}"}]} if "prompt" in body
                         else {"choices": [{"index": 0, "delta": {key: f"t{i}"}}]})
                data = "{not json" if s.malformed_at == i else json.dumps(chunk)
                h.wfile.write(f"data: {data}\n\n".encode())
                h.wfile.flush()
            if s.usage:
                n = s.reasoning + s.content
                usage = {"prompt_tokens": s.prompt_tokens, "completion_tokens": n,
                         "completion_tokens_details": {"reasoning_tokens": s.reasoning}}
                h.wfile.write(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n".encode())
            if not s.no_done:
                h.wfile.write(b"data: [DONE]\n\n")
            h.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass
