"""Start a real uvicorn server on 127.0.0.1 (free port); shared by the serve tests."""

import socket
import threading
import time

import uvicorn

from k3.serve.app import Server, build_app

MODEL = "default-model"
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
# What the scripted model "generates" for the tool-call tests.
REPLY = {"role": "assistant", "reasoning_content": "Look it up.", "content": "",
         "tool_calls": [{"id": "x", "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}}]}


def _start(server: Server):
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    uv = uvicorn.Server(uvicorn.Config(build_app(server), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=uv.run, daemon=True)
    thread.start()
    for _ in range(100):
        if uv.started:
            break
        time.sleep(0.05)
    return uv, thread, f"http://127.0.0.1:{port}"
