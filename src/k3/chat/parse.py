"""Incremental XTML parser for generated assistant messages. It never raises on model output.

Feed generated token ids one at a time (`feed`) and get events; `close()` ends the stream and returns
the last events; `finish()` returns reasoning, content and OpenAI-style tool calls plus a list of
problems. What was streamed is the message: the deltas of reasoning, content and each call's name
and argument fragments concatenate to exactly what `finish()` returns (tested at every cut point).

Malformed, truncated or interleaved markup is repaired best-effort and reported. Text the model wrote
is kept (text outside any channel goes to `content`); special tokens are never text (spec §6.1): one
outside XTML's four markers is dropped and reported, and a tag header never finished with `<|sep|>`
is dropped and reported, except a close header
naming an open tag, which closes it (`thought<|close|>think<|open|>response…`). A later channel
marker inside an unclosed think channel (an opened response or tools block, an orphan response
close, the message end) closes it: the model sometimes omits `<|close|>think<|sep|>` (vLLM 53246).

Choices where peer engines differ: a call the output ends inside (max_tokens) is kept with the arguments
generated so far, closed so they parse, marked `complete=False` and reported (the server's `warning` says
so: `{}` or a clipped value must not pass for a finished call); a call without a tool name is dropped (a
problem); whitespace
between or inside calls, outside arguments, is not content; a call to a tool that was not offered
(`tools=` names given) is a problem, and dropped with `reject_unknown_tools=True`; an answer written
only in the think channel stays reasoning unless `force_nonempty_content=True` (SGLang's option),
which moves it to content when the message has neither content nor tool calls.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterable

from k3.chat.calls import CallBuilder
from k3.chat.events import ContentDelta, MessageEnd, ParsedMessage, ReasoningDelta
from k3.chat.specials import CLOSE, OPEN, SEP

_HEADER = re.compile(r'\s*([^\s"=]+)((?:\s+[^\s"=]+="[^"]*")*)\s*$')
_ATTR = re.compile(r'([^\s"=]+)="([^"]*)"')
_ENTITY = re.compile(r"&(amp|quot);")
CHANNELS = ("think", "response", "argument", "json")
KNOWN = CHANNELS + ("message", "tools", "call")


def unescape_attr(value: str) -> str:
    return _ENTITY.sub(lambda m: "&" if m.group(1) == "amp" else '"', value)


def parse_header(text: str) -> tuple[str, dict[str, str]] | None:
    m = _HEADER.match(text)
    if not m:
        return None
    return m.group(1), {k: unescape_attr(v) for k, v in _ATTR.findall(m.group(2))}


class MessageParser:
    """`thinking`: the generation prompt opened the think channel (else the response channel).
    `prompt_open=False` parses from `<|open|>message ...` instead of after the generation prompt."""

    def __init__(self, tokenizer, *, thinking: bool = True, prompt_open: bool = True,
                 id_factory: Callable[[int], str] | None = None, tools: Iterable[str] | None = None,
                 reject_unknown_tools: bool = False, force_nonempty_content: bool = False):
        self.tok = tokenizer
        self.tools = None if tools is None else set(tools)
        self.reject_unknown_tools, self.force_nonempty_content = reject_unknown_tools, force_nonempty_content
        self.dropping = False                   # inside a call that will not be reported (no or unknown name)
        self.closed = False
        self.stack: list[str] = ["message", "think" if thinking else "response"] if prompt_open else []
        self.mode = "text"                      # text | open | close (reading a tag header)
        self.header: list[str] = []
        self.decoder = tokenizer.stream_decoder()
        self.result = ParsedMessage()
        self.reasoning: list[str] = []
        self.content: list[str] = []
        self.call: CallBuilder | None = None
        self.new_id = id_factory or (lambda i: f"call_{uuid.uuid4().hex[:24]}")
        self._said: set[str] = set()

    def problem(self, text: str, once: str | None = None) -> None:
        if once is None or once not in self._said:
            self.result.problems.append(text)
            if once:
                self._said.add(once)

    def feed_all(self, ids: Iterable[int]) -> list:
        return [e for t in ids for e in self.feed(t)]

    def feed(self, token_id: int) -> list:
        tok = self.tok
        if self.closed:
            self.problem("tokens after close() are ignored", once="after-close")
            return []
        if token_id in (tok.open_id, tok.close_id, tok.sep_id, tok.end_of_msg_id):
            return self._text(self.decoder.flush()) + self._marker(token_id)
        if token_id in tok.special_ids:   # never text (spec §6.1): [EOS], media and reserved ids
            self.problem(f"special token {token_id} is not part of XTML; dropped", once=f"special-{token_id}")
            return []
        try:
            return self._text(self.decoder.feed(token_id))
        except ValueError:
            self.problem(f"token id {token_id} is outside the vocabulary; ignored")
            return []

    def _text(self, text: str) -> list:
        if not text:
            return []
        if self.mode != "text":
            self.header.append(text)
            return []
        if self.result.ended:
            self.problem("text after <|end_of_msg|> (kept in content)", once="after-end")
            self.content.append(text)
            return [ContentDelta(text)]
        return self._deliver(text)

    def _deliver(self, text: str) -> list:
        channel = next((t for t in reversed(self.stack) if t in KNOWN), None)
        if channel == "think":
            self.reasoning.append(text)
            return [ReasoningDelta(text)]
        if channel in ("argument", "json", "call") and self.call is not None:
            return self._call_events(self.call.text(text))
        if channel in ("tools", "call") and not text.strip():
            return []                           # layout between calls, not content
        if channel != "response":
            self.problem(f"text outside any channel (kept in content): {text[:40]!r}", once="outside")
        self.content.append(text)
        return [ContentDelta(text)]

    def _marker(self, token_id: int) -> list:
        tok = self.tok
        events = []
        if token_id == tok.sep_id and self.mode != "text":
            header, kind = "".join(self.header), self.mode
            self.mode, self.header = "text", []
            return self._open(header) if kind == "open" else self._close(header.strip())
        if self.mode != "text":
            events = self._abandon_header()
        if token_id == tok.end_of_msg_id:
            return events + self._end()
        if token_id == tok.sep_id:
            self.problem(f"stray {SEP} (kept in content)")
            return events + self._deliver(SEP)
        self.mode = "open" if token_id == tok.open_id else "close"
        return events

    def _abandon_header(self) -> list:
        """A tag header cut short by another marker or the end: never text. A close header that names
        an open tag closes it (a missing <|sep|>); anything else is dropped."""
        kind, header = self.mode, "".join(self.header)
        self.mode, self.header = "text", []
        literal = (OPEN if kind == "open" else CLOSE) + header
        if kind == "close" and header.strip() in self.stack:
            self.problem(f"tag header {literal!r} was never finished with {SEP}: read as the close of "
                         f"<{header.strip()}>")
            return self._close(header.strip())
        self.problem(f"tag header {literal!r} was never finished with {SEP}: dropped (special tokens are never text)")
        return []

    def _call_events(self, events: list) -> list:
        return [] if self.dropping else events

    def _open(self, header: str) -> list:
        parsed = parse_header(header)
        if parsed is None:
            self.problem(f"unreadable tag header {header!r}")
            parsed = (header.split()[0] if header.split() else "", {})
        name, attrs = parsed
        events = []
        if name in ("response", "tools", "call") and "think" in self.stack:
            self.problem(f"<{name}> opened inside the think channel: think closed implicitly")
            events += self._pop_to("think")
        if name in ("tools", "call") and "response" in self.stack:
            self.problem(f"<{name}> opened inside the response channel: response closed implicitly")
            events += self._pop_to("response")
        if name == "call":
            events += self._open_call(attrs)
        elif name == "argument":
            events += self._open_argument(attrs)
        elif name == "json" and self.call is not None:
            self.call.open_json()
        elif name not in KNOWN:
            self.problem(f"unknown tag <{name}>; its text goes to the enclosing channel")
        elif name == "message" and self.stack:
            self.problem("a message opened inside a message")
        self.stack.append(name)
        return events

    def _open_call(self, attrs: dict) -> list:
        events = self._pop_to("call") if self.call is not None else []
        if "tools" not in self.stack:
            self.problem("<call> outside a <tools> block")
        index, name = len(self.result.tool_calls), attrs.get("tool", "")
        self.dropping = not name
        if not name:
            self.problem("a tool call has no tool name: dropped")
        elif self.tools is not None and name not in self.tools:
            self.dropping = self.reject_unknown_tools
            self.problem(f"tool call {index} calls {name!r}, which was not offered"
                         + (": dropped" if self.dropping else ""))
        self.call = CallBuilder(index, self.new_id(index), name, self.result.problems)
        return events + self._call_events([self.call.start()])

    def _open_argument(self, attrs: dict) -> list:
        if self.call is None:
            self.problem("<argument> outside a tool call; its text goes to content")
            return []
        if "argument" in self.stack:
            self._pop_to("argument")
        return self._call_events(self.call.open_argument(attrs.get("key", ""), attrs.get("type", "string")))

    def _close(self, name: str) -> list:
        if name not in self.stack:
            if name == "response" and "think" in self.stack:
                self.problem("response closed while the think channel was still open: think closed "
                             "implicitly (reasoning_content may hold response text)")
                return self._pop_to("think")
            self.problem(f"close of <{name}>, which is not open; ignored")
            return []
        events = []
        while self.stack[-1] != name:
            self.problem(f"<{self.stack[-1]}> closed implicitly by the close of <{name}>")
            events += self._pop()
        return events + self._pop()

    def _pop_to(self, name: str) -> list:
        events = []
        while name in self.stack:
            events += self._pop()
        return events

    def _pop(self) -> list:
        tag = self.stack.pop()
        if tag == "argument" and self.call is not None:
            return self._call_events(self.call.close_argument())
        if tag == "json" and self.call is not None:
            return self._call_events(self.call.close_json())
        if tag == "call" and self.call is not None:
            call, events = self.call.finish()
            events = self._call_events(events)
            if not self.dropping:
                self.result.tool_calls.append(call)
            self.call, self.dropping = None, False
            return events
        return []

    def _end(self) -> list:
        if self.result.ended:
            self.problem("a second <|end_of_msg|>")
            return []
        if self.stack:
            self.problem(f"message ended with open tags {self.stack}; closed implicitly")
        events = self._pop_to(self.stack[0]) if self.stack else []
        self.result.ended = True
        return events + [MessageEnd()]

    def close(self) -> list:
        """The stream ends here (the message end, max_tokens, a stop): flush pending text, drop an
        unfinished tag header, close what is open. Returns the last events; call once, before finish()."""
        if self.closed:
            return []
        events = self._text(self.decoder.flush())
        if self.mode != "text":
            events += self._abandon_header()
        if not self.result.ended:
            self.problem("the message has no <|end_of_msg|>: the output was cut off")
            if self.call is not None:
                self.call.cut = True
                self.problem(f"tool call {self.call.name!r} was cut off before its end: its arguments hold what "
                             "was generated, closed so they parse")
            if self.stack:
                events += self._pop_to(self.stack[0])
        if self.force_nonempty_content and self.reasoning and not self.content and not self.result.tool_calls:
            self.problem("the answer was written in the think channel: moved to content")
            moved, self.reasoning = "".join(self.reasoning), []
            self.content.append(moved)
            events.append(ContentDelta(moved))
        self.closed = True
        return events

    def finish(self) -> ParsedMessage:
        """The message: everything streamed, closed as `close()` closes it (called here if it was not)."""
        self.close()
        self.result.reasoning_content = "".join(self.reasoning)
        self.result.content = "".join(self.content)
        return self.result


def parse_message(tokenizer, token_ids: Iterable[int], **kwargs) -> ParsedMessage:
    parser = MessageParser(tokenizer, **kwargs)
    parser.feed_all(token_ids)
    return parser.finish()
