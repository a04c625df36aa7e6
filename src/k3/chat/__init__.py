"""k3.chat: K3's tokenizer and XTML chat format as a standalone library (no torch, no server).

render(messages, ...) -> segments; K3Tokenizer.encode_segments(segments) -> token ids;
MessageParser / parse_message(tokenizer, ids) -> reasoning, content, tool calls and problems.
"""

from k3.chat.events import (ContentDelta, MessageEnd, ParsedMessage, ReasoningDelta, ToolCall, ToolCallDelta,
                            ToolCallEnd, ToolCallStart)
from k3.chat.parse import MessageParser, parse_message
from k3.chat.render import THINKING_EFFORTS, render, to_text
from k3.chat.segments import ChatFormatError, Segment
from k3.chat.tokenizer import K3Tokenizer, TokenizerError

__all__ = ["ChatFormatError", "ContentDelta", "K3Tokenizer", "MessageEnd", "MessageParser", "ParsedMessage",
           "ReasoningDelta", "Segment", "THINKING_EFFORTS", "TokenizerError", "ToolCall", "ToolCallDelta",
           "ToolCallEnd", "ToolCallStart", "parse_message", "render", "to_text"]
