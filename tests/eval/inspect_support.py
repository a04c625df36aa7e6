"""Scripted models for tests through Inspect AI: mockllm with its usage given (Inspect's own estimate would
fetch an OpenAI encoding), answering from a list, one text always, or a function of the conversation."""

from __future__ import annotations

from inspect_ai.model import ModelOutput, ModelUsage, get_model


def output(text: str | None = None, tool: str | None = None, stop_reason: str = "stop", **args) -> ModelOutput:
    o = (ModelOutput.for_tool_call("mockllm/model", tool, args) if tool
         else ModelOutput.from_content("mockllm/model", text or "", stop_reason=stop_reason))
    o.usage = ModelUsage(input_tokens=1, output_tokens=1, total_tokens=2)
    return o


def always(text: str, stop_reason: str = "stop"):
    """A model that answers `text` to everything (a fresh model each call: no shared script)."""
    return get_model("mockllm/model", custom_outputs=lambda *a: output(text, stop_reason=stop_reason), memoize=False)


def scripted(outputs: list[ModelOutput]):
    return get_model("mockllm/model", custom_outputs=outputs, memoize=False)
