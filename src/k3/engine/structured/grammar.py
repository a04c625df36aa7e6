"""StructuredOutputs -> an llguidance grammar: k3's Lark grammar, and the user's text beside it as a grammar of its own.

The body is what the constraint asks for (`%json {schema}`, a regex, a choice of literals, or the
user's own grammar). For a chat answer the body is framed by K3's XTML: a free thinking channel
(when thinking is on), then `<|open|>response<|sep|>` BODY `<|close|>response<|sep|><|close|>message<|sep|>`,
then `<|end_of_msg|>`, the model's EOS, which llguidance allows once the grammar is complete. XTML
control tokens are special tokens in the grammar, so the parsed message is always well formed.

A user's regex, choice or Lark grammar is never spliced into k3's text: it is a second grammar in the
same llguidance definition (`{"grammars": [k3's, {"name": "user", ...}]}`), referenced as `@user`. So its
rule names (`start`, `body`, `?start`) cannot collide with k3's, its literals are never rewritten, and the
library parses it exactly as it would alone.
"""

from __future__ import annotations

import json

from k3.chat.specials import CLOSE, OPEN, SEP
from k3.engine.structured.params import StructuredOutputs
from k3.engine.structured.finite import finite_numbers
from k3.engine.structured.patterns import ecma_patterns
from k3.engine.structured.tool_args import xtml_arguments

JSON_STYLE = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
RESPONSE_TAIL = f'{CLOSE} "response" {SEP} {CLOSE} "message" {SEP}'
THINK_HEAD = f'THINK {CLOSE} "think" {SEP} {OPEN} "response" {SEP}'


MAX_CALLS = 4   # calls one constrained answer may make




def llguidance_grammar(so: StructuredOutputs) -> str:
    """The whole definition, as the JSON text llguidance's LLMatcher takes."""
    grammars = [{"lark_grammar": lark_grammar(so)}]
    user = _user_grammar(so)
    if user is not None:
        grammars.append({"name": "user", "lark_grammar": user})
    return json.dumps({"grammars": grammars})


def for_library(schema):
    """A JSON schema as validators read it, rewritten for the grammar library (patterns.py, finite.py)."""
    return finite_numbers(ecma_patterns(schema))


def lark_grammar(so: StructuredOutputs) -> str:
    """k3's own grammar (the user's regex, choice or grammar is `@user` in it)."""
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
        schema = for_library({"type": "object"} if so.json_object else so.json)
        if isinstance(schema, dict):   # compact JSON: free whitespace lets a weak model pad forever
            schema = {**schema, "x-guidance": {**JSON_STYLE, **schema.get("x-guidance", {})}}
        return f"body: %json {json.dumps(schema)}"
    return "body: @user"


def _user_grammar(so: StructuredOutputs) -> str | None:
    """The user's constraint as a Lark grammar of its own: a regex as one terminal (its unescaped `/`s
    escaped for Lark's delimiters), a choice as one terminal of literals (a lexeme, not parser rules: the
    parser holds about 2,000 items a row, the lexer any number), a grammar as given."""
    if so.regex is not None:
        return "start: /" + _slashes(so.regex) + "/"
    if so.choice is not None:
        return "start: CHOICE\nCHOICE: " + " | ".join(json.dumps(c) for c in so.choice)
    return so.grammar


def _slashes(regex: str) -> str:
    """`/` -> `\\/` where it is not escaped already (`\\/` stays: both mean a slash)."""
    out, i = [], 0
    while i < len(regex):
        if regex[i] == "\\" and i + 1 < len(regex):
            out.append(regex[i:i + 2])
            i += 2
            continue
        out.append("\\/" if regex[i] == "/" else regex[i])
        i += 1
    return "".join(out)


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
        schema = for_library(schema)
        xtml = xtml_arguments(f"xargs_{j}", schema, JSON_STYLE)
        rules.append(f'args_{j}: {OPEN} "json type=\\"object\\"" {SEP} jargs_{j} {CLOSE} "json" {SEP}'
                     + (f" | xargs_{j}" if xtml else ""))
        schema = {**schema, "x-guidance": {**JSON_STYLE, **schema.get("x-guidance", {})}}
        rules.append(f"jargs_{j}: %json {json.dumps(schema)}")
        rules += xtml or []
    return "\n".join(rules)
