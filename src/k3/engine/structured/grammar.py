"""StructuredOutputs -> a Lark grammar in llguidance's dialect.

The body is what the constraint asks for (`%json {schema}`, a regex, a choice of literals, or the
user's own grammar). For a chat answer the body is framed by K3's XTML: a free thinking channel
(when thinking is on), then `<|open|>response<|sep|>` BODY `<|close|>response<|sep|><|close|>message<|sep|>`,
then `<|end_of_msg|>`, the model's EOS, which llguidance allows once the grammar is complete. XTML
control tokens are special tokens in the grammar, so the parsed message is always well formed.
"""

from __future__ import annotations

import json
import re

from k3.chat.specials import CLOSE, OPEN, SEP
from k3.engine.structured.params import StructuredOutputs

JSON_STYLE = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
RESPONSE_TAIL = f'{CLOSE} "response" {SEP} {CLOSE} "message" {SEP}'
THINK_HEAD = f'THINK {CLOSE} "think" {SEP} {OPEN} "response" {SEP}'


def lark_grammar(so: StructuredOutputs) -> str:
    body_rules = _body(so)
    if so.frame is None:
        return f"start: body\n{body_rules}"
    head = THINK_HEAD if so.frame == "think" else ""
    think = "\nTHINK: /(?s:.*)/" if so.frame == "think" else ""
    return f"start: {head} body {RESPONSE_TAIL}{think}\n{body_rules}"


def _body(so: StructuredOutputs) -> str:
    if so.json is not None or so.json_object:
        schema = {"type": "object"} if so.json_object else so.json
        if isinstance(schema, dict):   # compact JSON: free whitespace lets a weak model pad forever
            schema = {**schema, "x-guidance": {**JSON_STYLE, **schema.get("x-guidance", {})}}
        return f"body: %json {json.dumps(schema)}"
    if so.regex is not None:
        return "body: BODY_RE\nBODY_RE: /" + so.regex.replace("/", "\\/") + "/"
    if so.choice is not None:
        return "body: " + " | ".join(json.dumps(c) for c in so.choice)
    return _embedded(so.grammar)


def _embedded(grammar: str) -> str:
    """The user's grammar with its `start` rule renamed `body` (and references to it)."""
    if not re.search(r"(?m)^\s*start\s*:", grammar):
        raise ValueError("structured_outputs.grammar: a Lark grammar needs a `start` rule")
    return re.sub(r"\bstart\b", "body", grammar)
