"""Incremental XTML parser for generated assistant messages. It never raises on model output.

Feed generated token ids one at a time (`feed`) and get events; `finish()` returns reasoning,
content and OpenAI-style tool calls plus a list of problems. Malformed, truncated or interleaved
markup is repaired best-effort and reported; no text the model wrote is dropped (text outside any
channel goes to `content`). A later channel marker inside an unclosed think channel (an opened
response or tools block, an orphan response close, the message end) closes it: the model sometimes
omits `<|close|>think<|sep|>` (vLLM issue 53246).
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
                 id_factory: Callable[[int], str] | None = None):
        self.tok = tokenizer
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
        if token_id in (tok.open_id, tok.close_id, tok.sep_id, tok.end_of_msg_id):
            return self._text(self.decoder.flush()) + self._marker(token_id)
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
        if channel in ("argument", "json") and self.call is not None:
            return self.call.text(text)
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
        """A tag header cut short by another marker or the end: kept as literal text."""
        literal = (OPEN if self.mode == "open" else CLOSE) + "".join(self.header)
        self.problem(f"tag header {literal!r} was never finished with {SEP} (kept as text)")
        self.mode, self.header = "text", []
        return self._deliver(literal)

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
        index = len(self.result.tool_calls)
        if not attrs.get("tool"):
            self.problem(f"tool call {index} has no tool name")
        self.call = CallBuilder(index, self.new_id(index), attrs.get("tool", ""), self.result.problems)
        return events + [self.call.start()]

    def _open_argument(self, attrs: dict) -> list:
        if self.call is None:
            self.problem("<argument> outside a tool call; its text goes to content")
            return []
        if "argument" in self.stack:
            self._pop_to("argument")
        return self.call.open_argument(attrs.get("key", ""), attrs.get("type", "string"))

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
            return self.call.close_argument()
        if tag == "call" and self.call is not None:
            call, events = self.call.finish()
            self.result.tool_calls.append(call)
            self.call = None
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

    def finish(self) -> ParsedMessage:
        """The message so far. Without <|end_of_msg|> (e.g. max_tokens), open parts are closed and reported."""
        self._text(self.decoder.flush())
        if self.mode != "text":
            self._abandon_header()
        if not self.result.ended:
            self.problem("the message has no <|end_of_msg|>: the output was cut off")
            if self.stack:
                self._pop_to(self.stack[0])
        self.result.reasoning_content = "".join(self.reasoning)
        self.result.content = "".join(self.content)
        return self.result


def parse_message(tokenizer, token_ids: Iterable[int], **kwargs) -> ParsedMessage:
    parser = MessageParser(tokenizer, **kwargs)
    parser.feed_all(token_ids)
    return parser.finish()
