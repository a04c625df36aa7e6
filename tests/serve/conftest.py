"""Fixtures: the bundled default model behind a real server on loopback."""

import pytest

from k3.defaults import default_model
from k3.engine import LLM
from k3.serve.app import Server
from k3.serve.async_engine import AsyncEngine
from serve_helpers import MODEL, _start


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


