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
from k3.engine.structured.patterns import ecma_patterns
from k3.engine.structured.tool_args import xtml_arguments

JSON_STYLE = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
RESPONSE_TAIL = f'{CLOSE} "response" {SEP} {CLOSE} "message" {SEP}'
THINK_HEAD = f'THINK {CLOSE} "think" {SEP} {OPEN} "response" {SEP}'


MAX_CALLS = 4   # calls one constrained answer may make


def lark_grammar(so: StructuredOutputs) -> str:
    if so.tools is not None:
        return _tool_grammar(so)
    body_rules = _body(so)
    if so.frame is None:
        return f"start: body\n{body_rules}"
    head = THINK_HEAD if so.frame == "think" else ""
    think = "\nTHINK: /(?s:.*)/" if so.frame == "think" else ""
    return f"start: {head} body {RESPONSE_TAIL}{think}\n{body_rules}"


def _body(so: StructuredOutputs) -> str:
    if so.json is not None or so.json_object:
        schema = {"type": "object"} if so.json_object else ecma_patterns(so.json)
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


def _tool_grammar(so: StructuredOutputs) -> str:
    """Free thinking and response text, then K3's tool section: `<|open|>tools<|sep|>`, calls numbered
    from 1, each `<|open|>call tool="NAME" index="I"<|sep|>` with arguments valid against the tool's
    parameters (a JSON block, or XTML per argument), `<|close|>tools<|sep|>`; required, or optional
    ("auto")."""
    head = THINK_HEAD if so.frame == "think" else ""
    # required: the response channel stays empty and the calls follow (as vLLM answers with calls only);
    # auto: free text, then calls or not.
    resp, tools = ("", "tools") if so.tool_mode == "required" else ("RESP", "tools?")
    rules = [f'start: {head} {resp} {CLOSE} "response" {SEP} {tools} {CLOSE} "message" {SEP}',
             "RESP: /(?s:.*)/", "THINK: /(?s:.*)/"]
    nested = ""
    for i in range(MAX_CALLS, 0, -1):
        nested = f"call_{i}" + (f" ({nested})?" if nested else "")
    rules.append(f'tools: {OPEN} "tools" {SEP} {nested} {CLOSE} "tools" {SEP}')
    for i in range(1, MAX_CALLS + 1):
        rules.append(f"call_{i}: " + " | ".join(f"c_{i}_{j}" for j in range(len(so.tools))))
        for j, (name, _) in enumerate(so.tools):
            head_text = json.dumps(f'call tool="{name}" index="{i}"')
            rules.append(f'c_{i}_{j}: {OPEN} {head_text} {SEP} args_{j} {CLOSE} "call" {SEP}')
    for j, (_, schema) in enumerate(so.tools):
        # Arguments as one JSON block, or (as the renderer writes them) one XTML block per argument where
        # that form constrains exactly (tool_args.py).
        schema = ecma_patterns(schema)
        xtml = xtml_arguments(f"xargs_{j}", schema, JSON_STYLE)
        rules.append(f'args_{j}: {OPEN} "json type=\\"object\\"" {SEP} jargs_{j} {CLOSE} "json" {SEP}'
                     + (f" | xargs_{j}" if xtml else ""))
        schema = {**schema, "x-guidance": {**JSON_STYLE, **schema.get("x-guidance", {})}}
        rules.append(f"jargs_{j}: %json {json.dumps(schema)}")
        rules += xtml or []
    return "\n".join(rules)
