"""Golden renderings written by hand from spec §6.2 (O/C/S/E = <|open|>/<|close|>/<|sep|>/<|end_of_msg|>)."""

import pytest

from k3.chat import ChatFormatError, Segment, render, to_text

O, C, S, E = "<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>"
GEN_THINK = f'{O}message role="assistant"{S}{O}think{S}'


def msg(attrs: str, body: str) -> str:
    return f"{O}message {attrs}{S}{body}{C}message{S}{E}"


def test_user_and_system_with_generation_prompt():
    out = to_text(render([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi", "name": "ann"}]))
    assert out == msg('role="system"', "Be brief.") + msg('role="user" name="ann"', "Hi") + GEN_THINK


def test_segments_are_split_exactly_like_the_official_encoder():
    segs = render([{"role": "user", "content": "Hi"}], add_generation_prompt=False)
    assert segs == [Segment(O, True), Segment("message"), Segment(" role"), Segment('="'), Segment("user"),
                    Segment('"'), Segment(S, True), Segment("Hi"), Segment(C, True), Segment("message"),
                    Segment(S, True), Segment(E, True)]


def test_non_thinking_generation_prompt_and_assistant():
    out = to_text(render([{"role": "user", "content": "Q"}, {"role": "assistant", "content": "A",
                                                               "reasoning_content": "dropped"}], thinking=False))
    assert out == (msg('role="user"', "Q") + msg('role="assistant"', f"{O}response{S}A{C}response{S}")
                   + f'{O}message role="assistant"{S}{O}response{S}')


def test_assistant_reasoning_and_empty_think_channel():
    with_r = render([{"role": "assistant", "content": "A", "reasoning_content": "R"}], add_generation_prompt=False)
    blank = render([{"role": "assistant", "content": "A", "reasoning_content": "  "}], add_generation_prompt=False)
    assert to_text(with_r) == msg('role="assistant"', f"{O}think{S}R{C}think{S}{O}response{S}A{C}response{S}")
    assert to_text(blank) == msg('role="assistant"', f"{O}think{S}{C}think{S}{O}response{S}A{C}response{S}")
    legacy = render([{"role": "assistant", "content": "A", "reasoning": "R"}], add_generation_prompt=False)
    assert legacy == with_r


def test_tool_calls_with_typed_arguments():
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": {
        "s": "x y", "n": 2.5, "b": False, "z": None, "o": {"k": [1]}, "a": [1, "é"]}}}
    out = to_text(render([{"role": "assistant", "content": "", "tool_calls": [call]}], add_generation_prompt=False))
    args = "".join(f'{O}argument key="{k}" type="{t}"{S}{v}{C}argument{S}' for k, t, v in [
        ("s", "string", "x y"), ("n", "number", "2.5"), ("b", "boolean", "false"), ("z", "null", "null"),
        ("o", "object", '{"k": [1]}'), ("a", "array", '[1, "é"]')])
    body = (f"{O}think{S}{C}think{S}{O}response{S}{C}response{S}{O}tools{S}"
            f'{O}call tool="f" index="1"{S}{args}{C}call{S}{C}tools{S}')
    assert out == msg('role="assistant"', body)


def test_arguments_as_json_text_and_invalid_json():
    good = {"function": {"name": "f", "arguments": '{"q": 1}'}}
    bad = {"function": {"name": "g", "arguments": "{oops"}}
    out = to_text(render([{"role": "assistant", "content": None, "tool_calls": [good, bad]}], thinking=False,
                         add_generation_prompt=False))
    assert f'{O}call tool="f" index="1"{S}{O}argument key="q" type="number"{S}1{C}argument{S}{C}call{S}' in out
    assert f'{O}call tool="g" index="2"{S}{O}json type="object"{S}{{oops{C}json{S}{C}call{S}' in out
    with pytest.raises(ChatFormatError, match="JSON object"):
        render([{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "[1]"}}]}])


def test_tool_results_reordered_by_tool_call_id_and_named_by_position():
    calls = [{"id": "a", "function": {"name": "first", "arguments": {}}},
             {"id": "b", "function": {"name": "second", "arguments": {}}}]
    out = to_text(render([{"role": "assistant", "content": "", "tool_calls": calls},
                          {"role": "tool", "tool_call_id": "b", "content": "B"},
                          {"role": "tool", "tool_call_id": "a", "content": "A"}], thinking=False,
                         add_generation_prompt=False))
    assert out.endswith(msg('role="tool" tool="first" index="1"', "A") + msg('role="tool" tool="second" index="2"', "B"))
    unnamed = to_text(render([{"role": "assistant", "content": "", "tool_calls": calls},
                              {"role": "tool", "content": "x"}], add_generation_prompt=False))
    assert unnamed.endswith(msg('role="tool" tool="first" index="1"', "x"))
    with pytest.raises(ChatFormatError, match="tool message needs"):
        render([{"role": "tool", "content": "x"}])


def test_tool_declaration_is_sorted_and_compact():
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "b": 1, "a": "é"}}}]
    out = to_text(render([{"role": "user", "content": "Q"}], tools=tools, add_generation_prompt=False))
    body = ('# Tools\nHere are the available tools, described in JSONSchema.\n\n```json\n'
            '[{"function":{"name":"f","parameters":{"a":"é","b":1,"type":"object"}},"type":"function"}]\n```')
    assert out == msg('role="system" type="tool-declare"', body) + msg('role="user"', "Q")


def test_system_message_with_tools_is_a_dynamic_declaration():
    out = to_text(render([{"role": "system", "tools": [{"name": "t"}]}], add_generation_prompt=False))
    assert out.startswith(f'{O}message role="system" type="tool-declare"{S}## New Tools Available\n')
    assert out.endswith('```json\n[{"name":"t"}]\n```' + f"{C}message{S}{E}")


def test_thinking_effort():
    out = to_text(render([{"role": "user", "content": "Q"}], thinking_effort="max", add_generation_prompt=False))
    assert out.startswith(f'{O}message role="system" type="thinking-effort"{S}`thinking_effort` guides')
    assert f"Now the system is invoked with `thinking_effort=max`.{C}message{S}{E}" in out
    assert "thinking-effort" not in to_text(render([], thinking=False, thinking_effort="max"))
    with pytest.raises(ChatFormatError, match="thinking_effort"):
        render([], thinking_effort="extreme")


def test_tool_choice_and_response_format():
    out = to_text(render([], tool_choice="required", response_format={"type": "json_object"}, add_generation_prompt=False))
    assert out == (msg('role="system" type="tool-choice"', "The system is invoked with `tool_choice=required`.\n"
                       "You MUST call tools in the next message.")
                   + msg('role="system" type="response-format"', "The system is invoked with "
                         "`response_format=json_object`.\nYour response must be raw JSON data without markdown "
                         "code blocks (```json) or any additional formatting."))
    schema = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object", "a": 1}}}
    out = to_text(render([], response_format=schema, add_generation_prompt=False))
    assert out.endswith('The JSON data must match the following schema:\n```json\n{"a":1,"type":"object"}\n```'
                        f"{C}message{S}{E}")
    assert "tool-choice" not in to_text(render([], tool_choice="auto"))
    with pytest.raises(ChatFormatError, match="tool_choice"):
        render([], tool_choice="sometimes")


def test_escaping_and_marker_text_in_user_content():
    segs = render([{"role": "user", "name": 'a"&b', "content": "x <|open|> y"}], add_generation_prompt=False)
    assert Segment("a&quot;&amp;b") in segs
    assert Segment("x <|open|> y", False) in segs
    assert all(s.special == (s.text in (O, C, S, E)) for s in segs)


def test_list_of_parts_and_images():
    parts = [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    assert to_text(render([{"role": "user", "content": parts}], add_generation_prompt=False)) == msg('role="user"', "ab")
    with pytest.raises(ChatFormatError, match="no images were given"):
        render([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "u"}}]}])
    with pytest.raises(ChatFormatError, match="role"):
        render([{"role": "robot", "content": "x"}])
