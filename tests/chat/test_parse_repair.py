"""Truncated, malformed and repaired output: special tokens are never text, what was streamed is the
finished message (at every cut point), and argument fragments are exactly the final arguments."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from k3.chat import ContentDelta, MessageParser, ReasoningDelta, ToolCallDelta, ToolCallStart, parse_message
from test_parse import C, E, O, S, generated_ids, ids_of

CALL = f'{O}tools{S}{O}call tool="f" index="1"{S}'
END_CALL = f"{C}call{S}{C}tools{S}{C}message{S}{E}"


def streamed(tok, ids, **kw):
    """(events, finished message) when `ids` are fed one by one and the stream then closes."""
    parser = MessageParser(tok, id_factory=lambda i: f"id{i}", **kw)
    events = [e for t in ids for e in parser.feed(t)]
    events += parser.close()
    return events, parser.finish()


def assert_stream_is_message(events, msg):
    assert "".join(e.text for e in events if isinstance(e, ReasoningDelta)) == msg.reasoning_content
    assert "".join(e.text for e in events if isinstance(e, ContentDelta)) == msg.content
    starts = [e for e in events if isinstance(e, ToolCallStart)]
    assert [(s.id, s.name) for s in starts] == [(c.id, c.name) for c in msg.tool_calls]
    for s, call in zip(starts, msg.tool_calls):
        assert "".join(e.arguments for e in events if isinstance(e, ToolCallDelta) and e.index == s.index) \
            == call.arguments


def test_cut_after_a_control_token_or_a_tag_name_leaves_no_debris(tok):
    cases = [(f"thought{C}", "thought", ""), (f"thought{C}think{S}{O}response", "thought", ""),
             (f"{C}think{S}{O}response{S}done{C}", "", "done"),
             (f"{C}think{S}{CALL}{O}argument key=\"code\" type=\"string\"{S}print(1{C}argu", "", "")]
    for markup, reasoning, content in cases:
        events, msg = streamed(tok, ids_of(tok, markup))
        assert (msg.reasoning_content, msg.content) == (reasoning, content), markup
        assert not any("<|" in c.arguments for c in msg.tool_calls)
        assert any("never finished" in p and "dropped" in p for p in msg.problems), markup
        assert_stream_is_message(events, msg)
    _, msg = streamed(tok, ids_of(tok, f"{C}think{S}{CALL}{O}argument key=\"code\" type=\"string\"{S}print(1{C}argu"))
    assert json.loads(msg.tool_calls[0].arguments) == {"code": "print(1"}


def test_a_close_missing_its_sep_is_repaired_without_debris(tok):
    events, msg = streamed(tok, ids_of(tok, f"thought{C}think{O}response{S}reply{C}response{S}{C}message{S}{E}"))
    assert (msg.reasoning_content, msg.content) == ("thought", "reply")
    assert any("read as the close of <think>" in p for p in msg.problems)
    assert_stream_is_message(events, msg)


def test_a_typed_argument_that_is_not_json_streams_what_the_call_ends_with(tok):
    markup = (f"{C}think{S}{CALL}{O}argument key=\"n\" type=\"number\"{S}twelve{C}argument{S}"
              f"{O}argument key=\"o\" type=\"object\"{S}{{\"a\": [1, 2]}}{C}argument{S}"
              f"{O}argument key=\"b\" type=\"boolean\"{S}1{C}argument{S}{END_CALL}")
    events, msg = streamed(tok, ids_of(tok, markup))
    assert json.loads(msg.tool_calls[0].arguments) == {"n": "twelve", "o": {"a": [1, 2]}, "b": "1"}
    assert sum("not valid" in p for p in msg.problems) == 2
    assert_stream_is_message(events, msg)


def test_a_call_without_a_tool_name_is_dropped(tok):
    markup = (f"{C}think{S}{O}tools{S}{O}call index=\"1\"{S}{O}argument key=\"a\" type=\"string\"{S}x{C}argument{S}"
              f"{C}call{S}{O}call tool=\"g\" index=\"2\"{S}{C}call{S}{C}tools{S}{C}message{S}{E}")
    events, msg = streamed(tok, ids_of(tok, markup))
    assert [(c.name, c.arguments) for c in msg.tool_calls] == [("g", "{}")]
    assert any("no tool name: dropped" in p for p in msg.problems)
    assert_stream_is_message(events, msg)


def test_whitespace_between_calls_is_not_content(tok):
    markup = (f"{C}think{S}{O}tools{S}\n  {O}call tool=\"f\" index=\"1\"{S}\n{C}call{S}\n\n"
              f"{O}call tool=\"g\" index=\"2\"{S}{C}call{S}\n{C}tools{S}{C}message{S}{E}")
    events, msg = streamed(tok, ids_of(tok, markup))
    assert msg.content == "" and [c.name for c in msg.tool_calls] == ["f", "g"] and msg.problems == []
    assert_stream_is_message(events, msg)


def test_a_tool_that_was_not_offered_is_reported_and_optionally_rejected(tok):
    markup = f"{C}think{S}{O}tools{S}{O}call tool=\"rm_rf\" index=\"1\"{S}{C}call{S}{C}tools{S}{C}message{S}{E}"
    kept = parse_message(tok, ids_of(tok, markup), tools=["get_weather"])
    assert [c.name for c in kept.tool_calls] == ["rm_rf"] and any("not offered" in p for p in kept.problems)
    events, rejected = streamed(tok, ids_of(tok, markup), tools=["get_weather"], reject_unknown_tools=True)
    assert rejected.tool_calls == [] and any("not offered: dropped" in p for p in rejected.problems)
    assert_stream_is_message(events, rejected)
    assert parse_message(tok, ids_of(tok, markup)).problems == [], "no tools= given: nothing to check against"


def test_an_answer_in_the_think_channel_moves_to_content_only_on_request(tok):
    markup = f"The answer is 4.{C}think{S}{O}response{S}{C}response{S}{C}message{S}{E}"
    plain = parse_message(tok, ids_of(tok, markup))
    assert (plain.reasoning_content, plain.content) == ("The answer is 4.", "")
    events, moved = streamed(tok, ids_of(tok, markup), force_nonempty_content=True)
    assert (moved.reasoning_content, moved.content) == ("", "The answer is 4.")
    assert "".join(e.text for e in events if isinstance(e, ContentDelta)) == moved.content


TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=20)
VALUES = st.recursive(st.none() | st.booleans() | st.integers(-10 ** 6, 10 ** 6) |
                      st.floats(allow_nan=False, allow_infinity=False) | TEXT,
                      lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=2),
                      max_leaves=5)
CALLS = st.lists(st.tuples(TEXT.filter(lambda t: t.strip() != ""), st.dictionaries(TEXT, VALUES, max_size=3)),
                 max_size=2)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(reasoning=TEXT, content=TEXT, calls=CALLS, thinking=st.booleans())
def test_at_every_cut_point_the_stream_is_the_message(tok, reasoning, content, calls, thinking):
    """Whatever the conversation and wherever max_tokens cuts it, the streamed deltas concatenate to the
    finished message, and each call's argument fragments to exactly its final (valid JSON) arguments."""
    message = {"role": "assistant", "reasoning_content": reasoning, "content": content,
               "tool_calls": [{"function": {"name": n, "arguments": a}} for n, a in calls]}
    ids = generated_ids(tok, message, thinking)
    for cut in range(len(ids) + 1):
        events, msg = streamed(tok, ids[:cut], thinking=thinking)
        assert_stream_is_message(events, msg)
        for call in msg.tool_calls:
            assert isinstance(json.loads(call.arguments), dict)
    final = parse_message(tok, ids, thinking=thinking)
    assert [json.loads(c.arguments) for c in final.tool_calls] == [a for _, a in calls]


def test_other_special_tokens_are_never_text(tok):
    eos = tok.specials["[EOS]"]
    ids = ids_of(tok, f"a{C}think{S}{O}response{S}b") + [eos, eos] + ids_of(tok, f"c{C}response{S}{C}message{S}{E}")
    events, msg = streamed(tok, ids)
    assert (msg.reasoning_content, msg.content) == ("a", "bc")
    assert sum("special token" in p for p in msg.problems) == 1
    assert_stream_is_message(events, msg)
