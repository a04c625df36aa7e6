import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from k3.chat import (ContentDelta, MessageEnd, MessageParser, ReasoningDelta, ToolCallDelta, ToolCallStart,
                     parse_message, render)

O, C, S, E = "<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>"


def ids_of(tok, markup: str) -> list[int]:
    """Generated-token ids for markup written with marker names (markers become specials)."""
    return tok.encode(markup, special=True)


def generated_ids(tok, message: dict, thinking: bool = True) -> list[int]:
    """What the model would generate for `message` after the generation prompt."""
    head = tok.encode_segments(render([], thinking=thinking))
    full = tok.encode_segments(render([message], thinking=thinking, add_generation_prompt=False))
    assert full[:len(head)] == head
    return full[len(head):]


def test_well_formed_message(tok):
    ids = ids_of(tok, f"plan{C}think{S}{O}response{S}Hello{C}response{S}{C}message{S}{E}")
    r = parse_message(tok, ids)
    assert (r.reasoning_content, r.content, r.tool_calls, r.problems, r.ended) == ("plan", "Hello", [], [], True)
    assert r.to_openai() == {"role": "assistant", "content": "Hello", "reasoning_content": "plan"}


def test_omitted_think_close_still_yields_tool_calls(tok):
    # vLLM issue 53246: no <|close|>think, prose, an orphan response close, then a good tools block.
    markup = (f"need the weather. Calling the tool now.{C}response{S}{O}tools{S}"
              f'{O}call tool="get_weather" index="1"{S}{O}argument key="city" type="string"{S}Paris'
              f"{C}argument{S}{C}call{S}{C}tools{S}{C}message{S}{E}")
    r = parse_message(tok, ids_of(tok, markup))
    assert [(c.name, json.loads(c.arguments)) for c in r.tool_calls] == [("get_weather", {"city": "Paris"})]
    assert "Calling the tool now." in r.reasoning_content
    assert r.ended and any("think closed implicitly" in p for p in r.problems)


def test_response_opened_without_closing_think(tok):
    r = parse_message(tok, ids_of(tok, f"R{O}response{S}A{C}response{S}{C}message{S}{E}"))
    assert (r.reasoning_content, r.content) == ("R", "A")
    assert any("inside the think channel" in p for p in r.problems)


def test_text_outside_any_channel_is_kept_as_content(tok):
    r = parse_message(tok, ids_of(tok, f"R{C}think{S}loose text{C}message{S}{E}"))
    assert r.content == "loose text" and any("outside any channel" in p for p in r.problems)


def test_truncated_inside_an_argument(tok):
    r = parse_message(tok, ids_of(tok, f'{C}think{S}{O}tools{S}{O}call tool="f" index="1"{S}'
                                       f'{O}argument key="q" type="string"{S}half a val'))
    assert not r.ended and r.tool_calls[0].name == "f"
    assert json.loads(r.tool_calls[0].arguments) == {"q": "half a val"}
    assert any("cut off" in p for p in r.problems)


def test_truncated_inside_a_tag_header_drops_the_header(tok):
    r = parse_message(tok, ids_of(tok, f'{C}think{S}{O}response{S}ok{O}call tool="f'))
    assert r.content == "ok" and r.tool_calls == []
    assert any("never finished" in p and "dropped" in p for p in r.problems)


def test_stray_markers_unknown_tags_and_text_after_end(tok):
    r = parse_message(tok, ids_of(tok, f"{C}think{S}{O}response{S}a{S}b{O}weird{S}c{C}weird{S}"
                                       f"{C}nothing{S}{C}response{S}{C}message{S}{E}tail{E}"))
    assert r.content == f"a{S}bctail"
    joined = " ".join(r.problems)
    for fragment in ("stray", "unknown tag", "not open", "after <|end_of_msg|>", "second"):
        assert fragment in joined


def test_invalid_typed_argument_is_kept_and_reported(tok):
    r = parse_message(tok, ids_of(tok, f'{C}think{S}{O}tools{S}{O}call tool="f" index="1"{S}'
                                       f'{O}argument key="n" type="number"{S}twelve{C}argument{S}{C}call{S}'
                                       f"{C}tools{S}{C}message{S}{E}"))
    assert json.loads(r.tool_calls[0].arguments) == {"n": "twelve"}
    assert any("not valid number" in p for p in r.problems)


def test_events_stream_the_same_message(tok):
    message = {"role": "assistant", "reasoning_content": "think hard", "content": "answer",
               "tool_calls": [{"function": {"name": "f", "arguments": {"a": [1, 2], "b": "x\"y"}}},
                              {"function": {"name": "g", "arguments": {}}}]}
    ids = generated_ids(tok, message)
    parser = MessageParser(tok, id_factory=lambda i: f"id{i}")
    events = [e for t in ids for e in parser.feed(t)]
    r = parser.finish()
    assert "".join(e.text for e in events if isinstance(e, ReasoningDelta)) == r.reasoning_content == "think hard"
    assert "".join(e.text for e in events if isinstance(e, ContentDelta)) == r.content == "answer"
    starts = [e for e in events if isinstance(e, ToolCallStart)]
    assert [(s.index, s.id, s.name) for s in starts] == [(0, "id0", "f"), (1, "id1", "g")]
    for call in r.tool_calls:
        streamed = "".join(e.arguments for e in events if isinstance(e, ToolCallDelta) and e.index == starts[
            [s.id for s in starts].index(call.id)].index)
        assert json.loads(streamed) == json.loads(call.arguments)
    assert isinstance(events[-1], MessageEnd) and r.problems == []


def test_split_at_every_token_boundary_gives_the_same_result(tok):
    ids = generated_ids(tok, {"role": "assistant", "reasoning_content": "r é", "content": "c 🙂",
                              "tool_calls": [{"function": {"name": "f", "arguments": {"k": "v"}}}]})
    whole = parse_message(tok, ids, id_factory=str)
    for cut in range(len(ids) + 1):
        p = MessageParser(tok, id_factory=str)
        first, second = p.feed_all(ids[:cut]), p.feed_all(ids[cut:])
        assert p.finish() == whole
        text = "".join(e.text for e in first + second if isinstance(e, (ReasoningDelta, ContentDelta)))
        assert text == whole.reasoning_content + whole.content


TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=30)
JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers(-10 ** 6, 10 ** 6) |
                           st.floats(allow_nan=False, allow_infinity=False) | TEXT,
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
                           max_leaves=6)
MARKERISH = st.sampled_from([O, C, S, E, "&", '"', "&amp;", "&quot;", '="', "think", " key", "\n"])
FIELD = st.lists(TEXT | MARKERISH, max_size=5).map("".join)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(reasoning=FIELD, content=FIELD, name=FIELD.filter(bool),
       args=st.dictionaries(FIELD, JSON_VALUES | FIELD, max_size=3), thinking=st.booleans())
def test_render_encode_parse_round_trip(tok, reasoning, content, name, args, thinking):
    message = {"role": "assistant", "reasoning_content": reasoning, "content": content,
               "tool_calls": [{"function": {"name": name, "arguments": args}}]}
    r = parse_message(tok, generated_ids(tok, message, thinking), thinking=thinking)
    assert r.problems == [] and r.ended
    assert r.reasoning_content == (reasoning if thinking and reasoning.strip() else "")
    assert r.content == content
    assert [c.name for c in r.tool_calls] == [name]
    assert json.loads(r.tool_calls[0].arguments) == args


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_parsing_never_raises_on_random_token_streams(tok, data):
    structural = [tok.open_id, tok.close_id, tok.sep_id, tok.end_of_msg_id]
    ids = data.draw(st.lists(st.sampled_from(structural) | st.integers(0, tok.vocab_size + 5), max_size=60))
    for thinking in (True, False):
        r = parse_message(tok, ids, thinking=thinking)
        assert isinstance(r.content, str) and isinstance(r.problems, list)


def test_tools_opened_inside_response_is_reported(tok):
    r = parse_message(tok, ids_of(tok, f'{C}think{S}{O}response{S}ok{O}tools{S}{O}call tool="f" index="1"{S}'
                                       f"{C}call{S}{C}tools{S}{C}message{S}{E}"))
    assert r.content == "ok" and [c.name for c in r.tool_calls] == ["f"]
    assert any("response closed implicitly" in p for p in r.problems)
