"""Render a conversation as K3's XTML segments (spec §6.2; the official `encoding_k3.py` protocol).

`render(messages, ...)` -> list[Segment]. Joining `.text` gives the prompt string; encoding segment
by segment (`K3Tokenizer.encode_segments`) gives the token ids, with specials recognised only in
structural markers. No BOS is emitted. Image parts take the blocks of `images` (k3.media's prepared images,
in the order `k3.chat.images.image_sources` lists them), each one segment in which specials are recognised.
"""

from __future__ import annotations

from k3.chat.images import IMAGE_PARTS, image_sources
from k3.chat.segments import ChatFormatError, Segment, Writer
from k3.chat.tools import compact_json, deep_sorted, reorder_tool_results, write_declaration, write_tool_calls
from k3.chat.validate import check_depth, check_message, check_tools

THINKING_EFFORTS = ("low", "medium", "high", "max")
EFFORT_BODY = ("`thinking_effort` guides on how much to think in your thinking channel (not including the "
               "response channel), supported values include `low`, `medium`, `high`, and `max`.\n"
               "Now the system is invoked with `thinking_effort={effort}`.")
TOOL_CHOICE_BODY = {
    "required": "The system is invoked with `tool_choice=required`.\nYou MUST call tools in the next message.",
    "none": "The system is invoked with `tool_choice=none`.\nYou MUST NOT call any tools in the next message.",
}
RAW_JSON = ("Your response must be raw JSON data without markdown code blocks (```json) or any additional "
            "formatting.")
ROLES = ("system", "user", "assistant", "tool")


def render(messages: list[dict], *, tools: list[dict] | None = None, thinking: bool = True,
           thinking_effort: str | None = None, add_generation_prompt: bool = True, tool_choice=None,
           response_format: dict | None = None, images: list | None = None) -> list[Segment]:
    messages = _checked(messages)
    image_sources(messages)                      # refuses video, and images outside user messages
    check_tools(tools)
    if response_format is not None:
        check_depth(response_format, "response_format")
    w = Writer()
    w.images = list(images) if images is not None else None
    if tools:
        write_declaration(w, tools)
    if thinking and thinking_effort is not None:
        if thinking_effort not in THINKING_EFFORTS:
            raise ChatFormatError(f"thinking_effort={thinking_effort!r}: use one of {THINKING_EFFORTS}")
        w.system_message("thinking-effort", EFFORT_BODY.format(effort=thinking_effort))
    calls, tool_index = None, 0
    for i, m in enumerate(reorder_tool_results(messages)):
        role = m["role"]
        if role == "assistant":
            calls, tool_index = m.get("tool_calls"), 0
            _assistant(w, m, thinking, f"messages[{i}]")
        elif role == "tool":
            tool_index += 1
            _tool_result(w, m, calls, tool_index, f"messages[{i}]")
        elif role == "system" and m.get("tools"):
            write_declaration(w, m["tools"], dynamic=True)
        else:
            _plain(w, m, role, f"messages[{i}]")
    if w.images:
        raise ChatFormatError(f"{len(w.images)} more image(s) given than the messages have image parts")
    _closing_instructions(w, tool_choice, response_format)
    if add_generation_prompt:
        w.open("message", [("role", "assistant")])
        w.open("think" if thinking else "response")
    return w.segments


def to_text(segments: list[Segment]) -> str:
    return "".join(s.text for s in segments)


def _checked(messages) -> list[dict]:
    if not isinstance(messages, list):
        raise ChatFormatError("messages must be a list of {'role': ..., 'content': ...} objects")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            raise ChatFormatError(f"messages[{i}]: needs a role in {ROLES}")
        check_message(m, f"messages[{i}]")
        if m["role"] == "system" and m.get("tools") is not None:
            check_tools(m["tools"], f"messages[{i}].tools")
    return messages


def _content(w: Writer, content, where: str) -> None:
    if content is None or isinstance(content, str):
        w.text(content or "")
        return
    if not isinstance(content, list):
        raise ChatFormatError(f"{where}.content: expected a string or a list of parts")
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in IMAGE_PARTS:
            _image(w, f"{where}.content[{j}]")
            continue
        if kind != "text" or not isinstance(part.get("text"), str):
            raise ChatFormatError(f"{where}.content[{j}]: expected {{'type': 'text', 'text': ...}}")
        w.text(part["text"])


def _image(w: Writer, where: str) -> None:
    if w.images is None:
        raise ChatFormatError(f"{where}: an image part, but no images were given to render (LLM.chat and the "
                              "server prepare them; in Python: render(..., images=[k3.media.prepare_image(...)]))")
    if not w.images:
        raise ChatFormatError(f"{where}: more image parts than images given")
    w.control(w.images.pop(0).block)


def _plain(w: Writer, m: dict, role: str, where: str) -> None:
    attrs = [("role", role)] + ([("name", m["name"])] if m.get("name") else [])
    w.open("message", attrs)
    _content(w, m.get("content"), where)
    w.close("message")
    w.end_of_message()


def _assistant(w: Writer, m: dict, thinking: bool, where: str) -> None:
    w.open("message", [("role", "assistant")] + ([("name", m["name"])] if m.get("name") else []))
    if thinking:
        # The think channel is structural: present (maybe empty) on every assistant turn.
        reasoning = m.get("reasoning_content") or m.get("reasoning")
        w.open("think")
        if reasoning is not None and str(reasoning).strip():
            w.text(reasoning)
        w.close("think")
    w.open("response")
    _content(w, m.get("content"), where)
    w.close("response")
    if m.get("tool_calls"):
        write_tool_calls(w, m["tool_calls"], where)
    w.close("message")
    w.end_of_message()


def _tool_result(w: Writer, m: dict, calls, index: int, where: str) -> None:
    name = m.get("tool", m.get("name"))
    if name is None and calls and index <= len(calls):
        call = calls[index - 1]
        name = (call.get("function", call) if isinstance(call, dict) else {}).get("name")
    if name is None:
        raise ChatFormatError(f"{where}: a tool message needs `name`, or a `tool_call_id` of the preceding "
                              "assistant's tool_calls, or to follow them in order")
    w.open("message", [("role", "tool"), ("tool", name), ("index", index)])
    _content(w, m.get("content"), where)
    w.close("message")
    w.end_of_message()


def _closing_instructions(w: Writer, tool_choice, response_format) -> None:
    if tool_choice in TOOL_CHOICE_BODY:
        w.system_message("tool-choice", TOOL_CHOICE_BODY[tool_choice])
    elif tool_choice not in (None, "auto"):
        raise ChatFormatError(f"tool_choice={tool_choice!r}: render takes 'auto', 'none' or 'required' (a named "
                              "tool is enforced by the server, which declares only that tool)")
    kind = response_format.get("type") if isinstance(response_format, dict) else response_format
    if kind == "json_object":
        w.system_message("response-format", f"The system is invoked with `response_format=json_object`.\n{RAW_JSON}")
    elif kind == "json_schema":
        schema = compact_json(deep_sorted(_schema(response_format)))
        w.system_message("response-format", "The system is invoked with `response_format=json_schema`.\n"
                         f"{RAW_JSON}\nThe JSON data must match the following schema:\n```json\n{schema}\n```")
    elif kind not in (None, "text", "structural_tag"):   # a structural tag's tags are the prompt's to explain
        raise ChatFormatError(f"response_format type {kind!r}: use 'text', 'json_object', 'json_schema' or "
                              "'structural_tag'")


def _schema(response_format: dict):
    spec = response_format.get("json_schema")
    if isinstance(spec, dict):
        return spec.get("schema", spec.get("json_schema", spec))
    raise ChatFormatError("response_format json_schema needs a 'json_schema' object with a 'schema'")
