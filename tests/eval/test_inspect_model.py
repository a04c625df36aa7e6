"""The in-process k3 engine as Inspect AI's model provider "k3" (issue 43, first step): messages, reasoning and
tool calls convert both ways, and Inspect's own CLI evaluates the bundled model with `--model k3/default`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("inspect_ai", reason="Inspect AI comes with the [eval] extra")

from inspect_ai.model import (ChatMessageAssistant, ChatMessageSystem, ChatMessageTool, ChatMessageUser,  # noqa: E402
                              ContentImage, ContentReasoning, ContentText)
from inspect_ai.tool import ToolCall, ToolCallError, ToolFunction  # noqa: E402

from k3.chat.events import ParsedMessage, ToolCall as K3Call  # noqa: E402
from k3.eval.inspect.messages import from_k3, to_k3, tool_choice_to_k3  # noqa: E402

TASKS = Path(__file__).with_name("inspect_tasks")


def test_messages_reasoning_and_tool_calls_go_to_k3():
    messages = [ChatMessageSystem(content="be brief"), ChatMessageUser(content="weather?"),
                ChatMessageAssistant(content=[ContentReasoning(reasoning="look it up"), ContentText(text="")],
                                     tool_calls=[ToolCall(id="c1", function="get_weather", arguments={"city": "Oslo"})]),
                ChatMessageTool(content="", tool_call_id="c1", function="get_weather",
                                error=ToolCallError(type="timeout", message="took too long"))]
    out = to_k3(messages)
    assert [m["role"] for m in out] == ["system", "user", "assistant", "tool"]
    assert out[2]["reasoning_content"] == "look it up"
    assert json.loads(out[2]["tool_calls"][0]["function"]["arguments"]) == {"city": "Oslo"}
    assert out[3] == {"role": "tool", "content": "error: took too long", "tool_call_id": "c1"}
    image = ContentImage(image="data:image/png;base64,AAAA")
    assert to_k3([ChatMessageUser(content=[ContentText(text="x"), image])])[0]["content"] == [
        {"type": "text", "text": "x"}, {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]
    with pytest.raises(ValueError, match="images in user messages"):
        to_k3([ChatMessageAssistant(content=[ContentText(text="x"), image])])
    assert tool_choice_to_k3("any") == "required" and tool_choice_to_k3("none") == "none"
    assert tool_choice_to_k3(ToolFunction(name="f")) == {"type": "function", "function": {"name": "f"}}


def test_a_parsed_message_comes_back_with_reasoning_and_calls():
    msg = from_k3(ParsedMessage(reasoning_content="think", content="ok",
                                tool_calls=[K3Call("c1", "f", '{"a": 1}'), K3Call("c2", "g", "not json")]))
    assert isinstance(msg.content[0], ContentReasoning) and msg.content[0].reasoning == "think"
    assert msg.text == "ok"
    assert msg.tool_calls[0].arguments == {"a": 1} and msg.tool_calls[0].parse_error is None
    assert msg.tool_calls[1].parse_error and msg.tool_calls[1].arguments == {}


def test_inspect_cli_evaluates_the_bundled_model(tmp_path):
    inspect = Path(sys.executable).with_name("inspect")
    # In the caller's environment: its HOME holds k3's native-kernel cache (a fresh HOME rebuilds it).
    r = subprocess.run([str(inspect), "eval", "hello_task.py", "--model", "k3/default", "-M", "cache_memory=64MiB",
                        "-M", "thinking=false", "--max-tokens", "8", "--temperature", "0", "--log-dir", str(tmp_path),
                        "--log-format", "json", "--display", "plain"],
                       capture_output=True, text=True, timeout=600, cwd=TASKS)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    log = json.loads(sorted(tmp_path.glob("*.json"))[-1].read_text())
    assert log["status"] == "success" and log["eval"]["model"] == "k3/default"
    sample = log["samples"][0]
    usage = sample["model_usage"]["k3/default"]
    assert usage["output_tokens"] == 8 and usage["input_tokens"] > 0
    assert sample["output"]["choices"][0]["stop_reason"] == "max_tokens"
    assert sample["output"]["choices"][0]["message"]["content"]


def test_an_eval_builds_the_model_once_and_runs_it_on_one_thread(tmp_path):
    """Inspect looks model facts up by name and, for a name it does not know, builds the provider again: a
    second copy of the weights. The provider registers its facts, so one LLM serves the whole run."""
    import gc

    from inspect_ai import eval as inspect_eval
    from inspect_ai.model import get_model, get_model_info

    from k3 import LLM
    from k3.eval.inspect.refusal import refusal

    before = sum(isinstance(o, LLM) for o in gc.get_objects())
    model = get_model("k3/default", cache_memory="64MiB", thinking=False, memoize=False)
    [log] = inspect_eval(refusal(limit=2), model=model, log_dir=str(tmp_path), display="none", max_tokens=4)
    assert log.status == "success", log.error
    assert sum(isinstance(o, LLM) for o in gc.get_objects()) - before == 1
    assert get_model_info("k3/default").context_length == model.api.llm.engine.max_model_len
