"""Start a real uvicorn server on 127.0.0.1 (free port); shared by the serve tests."""

import contextlib
import socket
import threading
import time

import uvicorn

from k3.serve.app import Server, build_app
from k3.serve.async_engine import AsyncEngine

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


@contextlib.contextmanager
def serving(llm, **server_kwargs):
    """A server around `llm` on a free loopback port for the duration of the block; yields its URL."""
    engine = AsyncEngine(llm.engine, max_queued=server_kwargs.pop("max_queued", 64))
    uv, thread, url = _start(Server(engine, llm.tokenizer, MODEL, **server_kwargs))
    try:
        yield url
    finally:
        uv.should_exit = True
        thread.join(5)
        engine.shutdown()


def wait_until_idle(llm, seconds: float = 5.0) -> dict:
    """The engine's stats once nothing runs (or after `seconds`)."""
    for _ in range(int(seconds / 0.05)):
        if llm.engine.stats()["running"] == 0:
            break
        time.sleep(0.05)
    return llm.engine.stats()
