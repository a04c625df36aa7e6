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
from k3.engine.structured.cycles import loosen_cyclic_refs
from k3.engine.structured.finite import finite_numbers
from k3.engine.structured.patterns import ecma_patterns
from k3.engine.structured.structural_tag import LarkWriter, lark_text, slashes
from k3.engine.structured.tool_args import xtml_arguments

JSON_STYLE = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
# What the grammar cannot enforce token by token (uniqueItems, not, if/then/else, propertyNames, oneOf's
# exclusivity, min/maxProperties over optional keys, unknown formats) it approximates by the nearest
# schema it can (`lenient`, `coerce_one_of`: a superset), and check.py checks the output against the whole
# schema. `exact` requests keep the library's refusal instead.
APPROXIMATE = {"lenient": True, "coerce_one_of": True}
RESPONSE_TAIL = f'{CLOSE} "response" {SEP} {CLOSE} "message" {SEP}'
THINK_HEAD = f'THINK {CLOSE} "think" {SEP} {OPEN} "response" {SEP}'


NUMBERED = 8    # calls whose index the grammar writes exactly (1, 2, ...); any further call takes any index


def llguidance_grammar(so: StructuredOutputs) -> str:
    """The whole definition, as the JSON text llguidance's LLMatcher takes."""
    grammars = [{"lark_grammar": lark_grammar(so)}]
    grammars += _user_grammars(so)
    return json.dumps({"grammars": grammars})


def for_library(schema, so: StructuredOutputs | None = None, approximate: bool = True):
    """A JSON schema as validators read it, rewritten for the grammar library (`rewrite`), with the
    request's JSON style and approximation options at its top (`json_style`). `approximate` off: nothing
    the library cannot enforce is approximated (structural tags)."""
    return styled(rewrite(schema, so, approximate), so, approximate)


def rewrite(schema, so: StructuredOutputs | None = None, approximate: bool = True):
    """patterns.py, cycles.py (unless exact) and finite.py, in that order."""
    schema = ecma_patterns(schema)
    if approximate and not (so is not None and so.exact):
        schema = loosen_cyclic_refs(schema)
    return finite_numbers(schema, closed=so is not None and so.disable_additional_properties)


def styled(schema, so: StructuredOutputs | None, approximate: bool = True):
    """The schema with llguidance's JSON options (json_style) at its top, a schema's own taking precedence."""
    if not isinstance(schema, dict):
        return schema
    return {**schema, "x-guidance": {**json_style(so, approximate), **schema.get("x-guidance", {})}}


def json_style(so: StructuredOutputs | None, approximate: bool = True) -> dict:
    """llguidance's JSON options: k3's compact separators, or the request's whitespace; APPROXIMATE unless
    the request asked for `exact` enforcement (or `approximate` is off: structural tags)."""
    style = dict(JSON_STYLE)
    if so is not None and so.disable_any_whitespace:
        style.update(item_separator=",", key_separator=":")
    elif so is not None and so.whitespace_pattern is not None:
        style = {"whitespace_flexible": True, "whitespace_pattern": so.whitespace_pattern}
    if approximate and not (so is not None and so.exact):
        style.update(APPROXIMATE)
    return style


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
        # compact JSON by default: free whitespace lets a weak model pad forever. Not enforced (OpenAI's
        # strict: false): any JSON value, the schema checked afterwards.
        schema = {"type": "object"} if so.json_object else so.json if so.enforced else True
        return f"body: %json {json.dumps(for_library(schema, so))}"
    return "body: @user"


def _user_grammars(so: StructuredOutputs) -> list[dict]:
    """The user's constraint as Lark grammars of their own, the first named `user`: a regex as one
    terminal (its unescaped `/`s escaped for Lark's delimiters), a choice as one terminal of literals (a
    lexeme, not parser rules: the parser holds about 2,000 items a row, the lexer any number), a grammar
    as given, a structural tag as written by structural_tag.py (its own grammars after it)."""
    if so.regex is not None:
        return [{"name": "user", "lark_grammar": "start: /" + slashes(so.regex) + "/"}]
    if so.choice is not None:
        return [{"name": "user", "lark_grammar": "start: CHOICE\nCHOICE: " + " | ".join(json.dumps(c) for c in so.choice)}]
    if so.grammar is not None:
        return [{"name": "user", "lark_grammar": so.grammar}]
    if so.structural_tag is not None:
        sides: list[dict] = []

        def side(text: str) -> str:
            lark = lark_text(text, "structured_outputs.structural_tag (a grammar format)")
            sides.append({"name": f"user_{len(sides)}", "lark_grammar": lark})
            return "@" + sides[-1]["name"]

        def json_rule(schema) -> str:
            return "%json " + json.dumps(for_library(schema, so, approximate=False))

        lark = LarkWriter(json_rule, side).grammar(so.structural_tag)
        return [{"name": "user", "lark_grammar": lark}, *sides]
    return []


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
    rules.append(f'tools: {OPEN} "tools" {SEP} {_calls(so)} {CLOSE} "tools" {SEP}')
    numbered = min(so.max_calls or NUMBERED, NUMBERED)
    for i in range(1, numbered + 1):
        rules.append(f"call_{i}: " + " | ".join(f"c_{i}_{j}" for j in range(len(so.tools))))
        for j, (name, _) in enumerate(so.tools):
            head_text = json.dumps(f'call tool="{name}" index="{i}"')
            rules.append(f'c_{i}_{j}: {OPEN} {head_text} {SEP} args_{j} {CLOSE} "call" {SEP}')
    if so.max_calls is None:         # past NUMBERED: any number more, each index written by the model
        rules.append("call_more: " + " | ".join(f"c_more_{j}" for j in range(len(so.tools))))
        for j, (name, _) in enumerate(so.tools):
            head_text = json.dumps(f'call tool="{name}" index="')
            rules.append(f'c_more_{j}: {OPEN} {head_text} /[1-9][0-9]{{0,5}}/ "\\"" {SEP} args_{j} {CLOSE} "call" {SEP}')
    for j, (_, schema) in enumerate(so.tools):
        # Arguments as one JSON block, or (as the renderer writes them) one XTML block per argument where
        # that form constrains exactly (tool_args.py).
        schema = rewrite(schema, so)
        xtml = xtml_arguments(f"xargs_{j}", schema, json_style(so))
        rules.append(f'args_{j}: {OPEN} "json type=\\"object\\"" {SEP} jargs_{j} {CLOSE} "json" {SEP}'
                     + (f" | xargs_{j}" if xtml else ""))
        rules.append(f"jargs_{j}: %json {json.dumps(styled(schema, so))}")
        rules += xtml or []
    return "\n".join(rules)


def _calls(so: StructuredOutputs) -> str:
    """The calls of one tool section: call_1, then optionally call_2 (nested), ... up to max_calls, or past
    NUMBERED any number more (call_more*)."""
    last = min(so.max_calls or NUMBERED, NUMBERED)
    nested = "call_more*" if so.max_calls is None else ""
    for i in range(last, 0, -1):
        nested = f"call_{i}" + (f" ({nested})?" if nested else "")
    return nested
