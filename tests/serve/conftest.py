"""A real uvicorn server on 127.0.0.1 (free port) around the bundled default model."""

import socket
import threading
import time

import pytest
import uvicorn

from k3.defaults import default_model
from k3.engine import LLM
from k3.serve.app import Server, build_app
from k3.serve.async_engine import AsyncEngine

MODEL = "default-model"


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


@pytest.fixture(scope="module")
def llm():
    return LLM(str(default_model()), max_num_seqs=8, cache_memory="64MiB")


@pytest.fixture(scope="module")
def base(llm):
    engine = AsyncEngine(llm.engine, max_queued=64)
    uv, thread, url = _start(Server(engine, llm.tokenizer, MODEL))
    yield url
    uv.should_exit = True
    thread.join(5)
    engine.shutdown()


