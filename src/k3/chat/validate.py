"""Strict checks of what a client sends: messages, tool declarations, tool_choice and nested JSON.

Each raises ChatFormatError (a ValueError: the server's 400) naming the field, so a malformed request
is refused before it reaches the renderer or the engine, never half-accepted. Nesting is checked
without recursion: a schema nested thousands deep is refused, not a RecursionError."""

from __future__ import annotations

import re

from k3.chat.segments import ChatFormatError

MAX_JSON_DEPTH = 64           # far beyond any real tool schema; deep_sorted/json.dumps recurse on it
TOOL_CHOICES = ("none", "auto", "required")
TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")   # OpenAI's rule for a request's tool names


def check_tool_names(tools, messages) -> None:
    """A request's tool names (declared, and in its history's calls) as OpenAI allows them. The renderer
    escapes any name, but a client sending ESC or a newline as a name has a bug a 400 shows it; run after
    check_tools and check_message, which check the shapes."""
    declared = [(f"tools[{i}]", t.get("function", t)) for i, t in enumerate(tools or ())]
    for i, m in enumerate(messages):
        declared += [(f"messages[{i}].tools[{j}]", t.get("function", t)) for j, t in enumerate(m.get("tools") or ())]
        declared += [(f"messages[{i}].tool_calls[{j}].function", c["function"])
                     for j, c in enumerate(m.get("tool_calls") or ())]
    for where, fn in declared:
        name = fn.get("name") if isinstance(fn, dict) else None
        if not isinstance(name, str) or not TOOL_NAME.fullmatch(name):
            shown = name.encode("unicode_escape").decode()[:80] if isinstance(name, str) else name
            raise ChatFormatError(f"{where}.name: tool names are 1-64 characters of a-z, A-Z, 0-9, _ and -, got "
                                  f"{shown!r}")


def check_depth(value, where: str, limit: int = MAX_JSON_DEPTH) -> None:
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            raise ChatFormatError(f"{where}: nested more than {limit} levels deep")
        stack.extend((child, depth + 1) for child in children)


def _optional_str(m: dict, key: str, where: str) -> None:
    if m.get(key) is not None and not isinstance(m[key], str):
        raise ChatFormatError(f"{where}.{key}: must be a string, not {type(m[key]).__name__}")


def check_message(m: dict, where: str) -> None:
    """Content is a string or a list of parts (null only from the assistant, or a system message that
    declares tools); names and ids are strings."""
    content = m.get("content")
    declares_tools = m["role"] == "system" and m.get("tools") is not None
    if content is None and m["role"] != "assistant" and not declares_tools:
        raise ChatFormatError(f"{where}.content: a {m['role']} message needs content (a string or a list of parts)")
    for key in ("reasoning_content", "reasoning", "name", "tool_call_id", "tool"):
        _optional_str(m, key, where)
    calls = m.get("tool_calls")
    if calls is None:
        return
    if m["role"] != "assistant" or not isinstance(calls, list):
        raise ChatFormatError(f"{where}.tool_calls: only an assistant message has tool_calls, as a list")
    for j, call in enumerate(calls):
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise ChatFormatError(f"{where}.tool_calls[{j}]: needs function.name, a non-empty string")
        if fn.get("arguments") is not None and not isinstance(fn["arguments"], (str, dict)):
            raise ChatFormatError(f"{where}.tool_calls[{j}].function.arguments: must be a JSON object or its text")
        _optional_str(call, "id", f"{where}.tool_calls[{j}]")
        check_depth(fn.get("arguments"), f"{where}.tool_calls[{j}].function.arguments")


MAX_TOOLS = 128   # tools one request may offer (OpenAI's limit; thousands stalled rendering and grammar building)


FUNCTION_KEYS = {"name", "description", "parameters", "strict"}   # `strict`: calls are enforced either way


def check_tools(tools, where: str = "tools") -> None:
    """OpenAI declarations {"type": "function", "function": {"name", "description", "parameters"}};
    a bare {"name": ...} (K3's dynamic tool declarations) is accepted too. At most MAX_TOOLS of them."""
    if tools is None:
        return
    if not isinstance(tools, list):
        raise ChatFormatError(f"{where}: must be a list of tool declarations")
    if len(tools) > MAX_TOOLS:
        raise ChatFormatError(f"{where}: {len(tools):,} tools is over the limit of {MAX_TOOLS}")
    for i, tool in enumerate(tools):
        at = f"{where}[{i}]"
        if not isinstance(tool, dict):
            raise ChatFormatError(f"{at}: must be an object")
        if "type" in tool or "function" in tool:
            if tool.get("type") != "function":
                raise ChatFormatError(f"{at}.type: must be 'function'")
            fn, at = tool.get("function"), f"{at}.function"
            if not isinstance(fn, dict):
                raise ChatFormatError(f"{at}: missing; give {{'name': ..., 'parameters': {{...}}}}")
        else:
            fn = tool
        if not isinstance(fn.get("name"), str) or not fn["name"].strip():
            raise ChatFormatError(f"{at}.name: must be a non-empty string")
        unknown = sorted(set(fn) - FUNCTION_KEYS) + sorted(set(tool) - {"type", "function"} if fn is not tool else [])
        if unknown:
            raise ChatFormatError(f"{at}: unknown field(s) {', '.join(unknown)}; a tool takes type and function "
                                  f"({', '.join(sorted(FUNCTION_KEYS))})")
        if fn.get("strict") is not None and not isinstance(fn["strict"], bool):
            raise ChatFormatError(f"{at}.strict: true or false")
        _optional_str(fn, "description", at)
        params = fn.get("parameters")
        if params is not None and not isinstance(params, dict):
            raise ChatFormatError(f"{at}.parameters: must be a JSON Schema object")
        check_depth(params, f"{at}.parameters")


def check_tool_choice(choice) -> str | None:
    """-> the named function of {"type": "function", "function": {"name": ...}}, else None."""
    if choice is None or choice in TOOL_CHOICES:
        return None
    if isinstance(choice, dict):
        fn = choice.get("function")
        if choice.get("type") == "function" and isinstance(fn, dict) and isinstance(fn.get("name"), str):
            return fn["name"]
    raise ChatFormatError(f"tool_choice: use {', '.join(map(repr, TOOL_CHOICES))} or "
                          "{'type': 'function', 'function': {'name': NAME}}")
