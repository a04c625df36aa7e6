"""Tools in XTML: declarations, assistant tool calls with typed arguments, and tool results
re-ordered into the order of the assistant's `tool_calls` by `tool_call_id`."""

from __future__ import annotations

import json

from k3.chat.segments import ChatFormatError, Writer

DECLARE_BODY = "# Tools\nHere are the available tools, described in JSONSchema.\n\n```json\n{tools}\n```"
DYNAMIC_DECLARE_BODY = (
    "## New Tools Available\nThe system dynamically extends the toolset via lazy-loading.\n"
    "You have access to all existing and extended tools.\nHere are the specs for the extended tools.\n\n"
    "```json\n{tools}\n```")


def deep_sorted(obj):
    if isinstance(obj, dict):
        return {k: deep_sorted(v) for k, v in sorted(obj.items())}
    if isinstance(obj, list):
        return [deep_sorted(v) for v in obj]
    return obj


def compact_json(value) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def write_declaration(w: Writer, tools, dynamic: bool = False) -> None:
    body = DYNAMIC_DECLARE_BODY if dynamic else DECLARE_BODY
    w.system_message("tool-declare", body.format(tools=compact_json(deep_sorted(tools))))


def xtml_type(value) -> str:
    if isinstance(value, bool):
        return "boolean"
    if value is None:
        return "null"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return "object" if isinstance(value, dict) else "array"


def xtml_value(value) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def tool_name(tool: dict) -> str | None:
    """The function name of an OpenAI tool declaration ({"type": "function", "function": {...}} or bare)."""
    return (tool.get("function") or tool).get("name")


def tool_names(tools: list[dict] | None) -> list[str] | None:
    """The names the parser checks calls against; None when no tools were offered."""
    return None if tools is None else [tool_name(t) for t in tools]


def call_function(call, where: str) -> dict:
    fn = call.get("function", call) if isinstance(call, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise ChatFormatError(f"{where}: a tool call needs function.name")
    return fn


def normalize_arguments(arguments, where: str) -> tuple[dict, str | None]:
    """-> (arguments dict, raw text when it is not valid JSON)."""
    if arguments is None or (isinstance(arguments, str) and not arguments.strip()):
        return {}, None
    if isinstance(arguments, dict):
        return arguments, None
    if not isinstance(arguments, str):
        raise ChatFormatError(f"{where}: arguments must be a JSON object or its JSON text")
    try:
        parsed = json.loads(arguments)
    except json.JSONDecodeError:
        return {}, arguments
    if not isinstance(parsed, dict):
        raise ChatFormatError(f"{where}: arguments must be a JSON object, got {type(parsed).__name__}")
    return parsed, None


def write_tool_calls(w: Writer, calls: list, where: str) -> None:
    w.open("tools")
    for index, call in enumerate(calls, start=1):
        fn = call_function(call, f"{where}.tool_calls[{index - 1}]")
        args, raw = normalize_arguments(fn.get("arguments"), f"{where}.tool_calls[{index - 1}]")
        w.open("call", [("tool", fn["name"]), ("index", index)])
        if raw is not None:
            w.open("json", [("type", "object")])
            w.text(raw)
            w.close("json")
        else:
            for key, value in args.items():
                w.open("argument", [("key", key), ("type", xtml_type(value))])
                w.text(xtml_value(value))
                w.close("argument")
        w.close("call")
    w.close("tools")


def reorder_tool_results(messages: list[dict]) -> list[dict]:
    """Sort each run of tool messages into the preceding assistant's tool_calls order when every
    message of the run names a known `tool_call_id`; the matched call's name becomes `tool`."""
    out: list[dict] = []
    positions: dict[str, tuple[int, str]] = {}
    i = 0
    while i < len(messages):
        m = messages[i]
        if m.get("role") != "tool":
            if m.get("role") == "assistant":
                positions = _call_positions(m.get("tool_calls") or [])
            out.append(m)
            i += 1
            continue
        j = i
        while j < len(messages) and messages[j].get("role") == "tool":
            j += 1
        run = messages[i:j]
        keys = [positions.get(str(t.get("tool_call_id"))) for t in run]
        if all(keys):
            ordered = sorted(zip(keys, range(len(run)), run), key=lambda x: (x[0][0], x[1]))
            out += [dict(t, tool=name) if name else t for (_, name), _, t in ordered]
        else:
            out += run
        i = j
    return out


def _call_positions(calls: list) -> dict[str, tuple[int, str]]:
    out: dict[str, tuple[int, str]] = {}
    for pos, call in enumerate(calls, start=1):
        if isinstance(call, dict) and call.get("id") is not None and str(call["id"]) not in out:
            fn = call.get("function", call)
            out[str(call["id"])] = (pos, fn.get("name") if isinstance(fn, dict) else None)
    return out
