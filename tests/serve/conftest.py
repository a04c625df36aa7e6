"""Fixtures: the bundled default model behind a real server on loopback."""

import pytest

from k3.defaults import default_model
from k3.engine import LLM
from k3.serve.app import Server
from k3.serve.async_engine import AsyncEngine
from k3.chat import render
from k3.testing.scripted import ScriptedModel
from serve_helpers import MODEL, REPLY, start_server


@pytest.fixture(scope="module")
def llm():
    return LLM(str(default_model()), max_num_seqs=8, cache_memory="64MiB")


@pytest.fixture(scope="module")
def base(llm):
    engine = AsyncEngine(llm.engine, max_queued=64)
    uv, thread, url = start_server(Server(engine, llm.tokenizer, MODEL))
    yield url
    uv.should_exit = True
    thread.join(5)
    engine.shutdown()




@pytest.fixture(scope="module")
def scripted_model():
    """A model that emits REPLY's tokens (its `step` counts through the script, shared by requests)."""
    tok = LLM(str(default_model()), cache_memory="8MiB").tokenizer
    tok.thinking = True   # the script answers as K3 does, reasoning first
    head = tok.encode_segments(render([]))
    script = tok.encode_segments(render([REPLY], add_generation_prompt=False))[len(head):]
    return ScriptedModel(script, tok.vocab_size, tok.end_of_msg_id), tok


@pytest.fixture(scope="module")
def tool_server(scripted_model):
    model, tok = scripted_model
    llm = LLM(model, tokenizer=tok, cache_memory="1MiB")
    engine = AsyncEngine(llm.engine)
    uv, thread, url = start_server(Server(engine, tok, MODEL, request_timeout=30))
    yield url
    uv.should_exit = True
    thread.join(5)
    engine.shutdown()


@pytest.fixture(scope="module")
def own_llm():
    """A second engine, for tests that start their own server while `base` drives `llm`."""
    return LLM(str(default_model()), max_num_seqs=8, cache_memory="64MiB")
