"""Shared by the serve tests: the scripted reply, tools, and a wait for an idle engine (the loopback server
itself is k3.testing.serving)."""

import time

from k3.testing.serving import serving, start_server  # noqa: F401  (re-exported for the serve tests)

MODEL = "default"
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
# What the scripted model "generates" for the tool-call tests.
REPLY = {"role": "assistant", "reasoning_content": "Look it up.", "content": "",
         "tool_calls": [{"id": "x", "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}}]}


def wait_until_idle(llm, seconds: float = 5.0) -> dict:
    """The engine's stats once nothing runs (or after `seconds`)."""
    for _ in range(int(seconds / 0.05)):
        if llm.engine.stats()["running"] == 0:
            break
        time.sleep(0.05)
    return llm.engine.stats()
