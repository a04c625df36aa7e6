"""EngineThread (engine/thread.py): one thread builds a model and steps it. Work runs there in order, errors
reach the caller, a call from the thread itself does not wait on itself, and an AsyncEngine given the
thread steps its engine there; the thread never holds the interpreter open at exit."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest

from k3 import LLM, SamplingParams
from k3.defaults import default_model
from k3.engine.thread import EngineThread


def test_work_runs_in_order_on_one_thread_and_errors_reach_the_caller():
    t = EngineThread()
    seen = [t.submit(lambda i=i: (i, threading.current_thread().name)) for i in range(5)]
    assert [f.result()[0] for f in seen] == list(range(5)) and {f.result()[1] for f in seen} == {"k3-engine"}
    with pytest.raises(ZeroDivisionError):
        t.call(lambda: 1 / 0)
    assert t.call(lambda: t.call(lambda: 7)) == 7          # from the thread itself: run in place, no deadlock


def test_an_async_engine_steps_on_the_thread_that_built_the_model():
    from k3.serve.async_engine import AsyncEngine

    thread = EngineThread()
    llm = thread.call(LLM, str(default_model()), cache_memory="64MiB")
    built_on = thread.call(threading.current_thread)
    stepped_on = []
    step = llm.engine.step
    llm.engine.step = lambda: stepped_on.append(threading.current_thread()) or step()
    engine = AsyncEngine(llm.engine, thread=thread)
    try:
        import asyncio

        async def one():
            async for out in engine.generate(llm.tokenizer.encode("Once upon a time"), SamplingParams(max_tokens=4)):
                last = out
            return last

        assert asyncio.run(one()).finished
    finally:
        engine.shutdown()
    assert stepped_on and set(stepped_on) == {built_on}


def test_a_waiting_engine_thread_does_not_keep_the_interpreter_alive():
    code = ("from k3.engine.thread import EngineThread\nimport queue\nq = queue.Queue()\n"
            "EngineThread().submit(q.get)\nprint('bye')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "bye"
