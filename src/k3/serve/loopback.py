"""A real uvicorn k3 server on a free loopback port, in this process: for `k3 check --model` (which measures
the local engine through the same HTTP path as a remote one) and for tests (serve, eval, bench)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time


def free_port() -> int:
    """A loopback port nobody listens on now (the kernel's choice)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(server):
    """Runs `server` (a k3.serve.app.Server) under uvicorn on a free loopback port -> (uvicorn server, thread, URL)."""
    import uvicorn

    from k3.serve.app import build_app
    from k3.serve.connection import config

    port = free_port()
    uv = uvicorn.Server(config(build_app(server), host="127.0.0.1", port=port, log_level="warning"))
    server.engine.on_stop(lambda reason: setattr(uv, "should_exit", True))
    thread = threading.Thread(target=uv.run, daemon=True)
    thread.start()
    for _ in range(100):
        if uv.started:
            break
        time.sleep(0.05)
    return uv, thread, f"http://127.0.0.1:{port}"


@contextlib.contextmanager
def serving(llm, model_name: str = "default", **server_kwargs):
    """A server around `llm` on a free loopback port for the duration of the block; yields its URL."""
    from k3.serve.app import Server
    from k3.serve.async_engine import AsyncEngine

    engine = AsyncEngine(llm.engine, max_queued=server_kwargs.pop("max_queued", 64))
    server_kwargs.setdefault("media", getattr(llm, "media", None))    # the checkpoint's image preprocessing
    uv, thread, url = start_server(Server(engine, llm.tokenizer, model_name, **server_kwargs))
    try:
        yield url
    finally:
        uv.should_exit = True
        thread.join(5)
        engine.shutdown()
