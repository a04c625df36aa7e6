"""XTML primitives: segments, tags, attributes. Each segment is tokenized on its own; only
structural markers are `special` (their `<|...|>` names become special token ids)."""

from __future__ import annotations

from dataclasses import dataclass

from k3.chat.specials import CLOSE, END_OF_MSG, OPEN, SEP


class ChatFormatError(ValueError):
    """A conversation that cannot be rendered as K3 XTML; the message names the message and field."""


@dataclass(frozen=True)
class Segment:
    text: str
    special: bool = False


def escape_attr(value) -> str:
    return str(value).replace("&", "&amp;").replace('"', "&quot;")


class Writer:
    """Appends segments; empty text never makes a segment."""

    def __init__(self):
        self.segments: list[Segment] = []
        self.images: list | None = None     # prepared images still to place (render's `images`)

    def text(self, text) -> None:
        text = str(text)
        if text:
            self.segments.append(Segment(text, False))

    def control(self, marker: str) -> None:
        self.segments.append(Segment(marker, True))

    def open(self, tag: str, attrs: list[tuple[str, object]] = ()) -> None:
        self.control(OPEN)
        self.text(tag)
        for key, value in attrs:
            # Four segments per attribute, as the official encoder emits them.
            self.text(f" {key}")
            self.text('="')
            self.text(escape_attr(value))
            self.text('"')
        self.control(SEP)

    def close(self, tag: str) -> None:
        self.control(CLOSE)
        self.text(tag)
        self.control(SEP)

    def end_of_message(self) -> None:
        self.control(END_OF_MSG)

    def system_message(self, kind: str, body: str) -> None:
        """An internal system message (`type` = tool-declare, thinking-effort, tool-choice, ...)."""
        self.open("message", [("role", "system"), ("type", kind)])
        self.text(body)
        self.close("message")
        self.end_of_message()
