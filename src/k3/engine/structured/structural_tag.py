"""Structural tags (vLLM's and SGLang's `structural_tag`, xgrammar's format) as one Lark grammar.

Two request forms are taken:
- the first one, `{"structures": [{"begin", "schema", "end"}, ...], "triggers": [...]}`: free text in
  which each trigger opens one of the structures whose `begin` starts with it;
- the composable one, `{"format": FORMAT}`, FORMAT one of `const_string` {value}, `json_schema`
  {json_schema}, `any_text`, `regex` {pattern}, `grammar` {grammar: Lark or GBNF}, `sequence` {elements},
  `or` {elements}, `tag` {begin, content, end}, `triggered_tags` {triggers, tags, at_least_one,
  stop_after_first} and `tags_with_separator` {tags, separator, at_least_one, stop_after_first}.

Free text around triggered tags never holds a trigger: a trigger always starts a tag, so the text
after the last tag is held to that too. Text inside a tag (`any_text` as its content) ends at the
first occurrence of the tag's `end`. JSON schemas inside a tag are enforced exactly (no keyword the
grammar cannot enforce is taken: the output is not checked against them afterwards).
"""

from __future__ import annotations

import json

TEXT = "/(?s:.*)/"
META = set("\\.+*?()|[]{}^$#&-~/")

FORMAT_KEYS = {"const_string": {"value"}, "json_schema": {"json_schema"}, "any_text": set(), "regex": {"pattern"},
               "grammar": {"grammar"}, "sequence": {"elements"}, "or": {"elements"}, "tag": {"begin", "content", "end"},
               "triggered_tags": {"triggers", "tags", "at_least_one", "stop_after_first"},
               "tags_with_separator": {"tags", "separator", "at_least_one", "stop_after_first"}}
REQUIRED = {"const_string": {"value"}, "json_schema": {"json_schema"}, "regex": {"pattern"}, "grammar": {"grammar"},
            "sequence": {"elements"}, "or": {"elements"}, "tag": {"begin", "content", "end"},
            "triggered_tags": {"triggers", "tags"}, "tags_with_separator": {"tags", "separator"}}


def normalize(value, where: str = "structural_tag") -> dict:
    """Either request form (a dict, or its JSON text) -> the composable FORMAT, checked; ValueError naming
    the field at fault."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise ValueError(f"{where}: not valid JSON ({e.msg})") from None
    if not isinstance(value, dict):
        raise ValueError(f"{where}: an object with `format`, or with `structures` and `triggers`")
    if value.get("type") in FORMAT_KEYS:      # a FORMAT already (normalized before)
        _check(value, where)
        return value
    value = {k: v for k, v in value.items() if k != "type" or v != "structural_tag"}
    if "format" in value:
        only_fields(value, {"format"}, where)
        _check(value["format"], f"{where}.format")
        return value["format"]
    only_fields(value, {"structures", "triggers"}, where)
    structures, triggers = value.get("structures"), value.get("triggers")
    if not isinstance(structures, list) or not structures or not isinstance(triggers, list) or not triggers:
        raise ValueError(f"{where}: `structures` (a list of begin/schema/end) and `triggers` (a list of strings)")
    tags = []
    for i, s in enumerate(structures):
        if not isinstance(s, dict):
            raise ValueError(f"{where}.structures[{i}]: an object with begin, schema and end")
        only_fields(s, {"begin", "schema", "end"}, f"{where}.structures[{i}]")
        tags.append({"type": "tag", "begin": s.get("begin"), "end": s.get("end"),
                     "content": {"type": "json_schema", "json_schema": s.get("schema", {})}})
    fmt = {"type": "triggered_tags", "triggers": triggers, "tags": tags}
    _check(fmt, where)
    return fmt


def lark_text(grammar: str, where: str) -> str:
    """A grammar in llguidance's Lark dialect: GBNF/EBNF (`root ::= ...`, as llama.cpp and xgrammar take it)
    converted by the library's own converter, Lark as given; ValueError naming `where` for GBNF that does
    not parse."""
    if "::=" not in grammar:
        return grammar
    from llguidance.gbnf_to_lark import any_to_lark

    try:
        return any_to_lark(grammar)
    except Exception as e:
        raise ValueError(f"{where}: not a valid GBNF grammar ({e}); give GBNF (`root ::= ...`) or Lark "
                         "(`start: ...`)") from None


def only_fields(value: dict, allowed: set, where: str) -> None:
    """ValueError naming any key of `value` outside `allowed` (a request's field k3 would otherwise drop)."""
    unknown = sorted(set(value) - allowed)
    if unknown:
        raise ValueError(f"{where}: unknown field(s) {', '.join(unknown)}; it takes {', '.join(sorted(allowed))}")


def _check(fmt, where: str) -> None:
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind not in FORMAT_KEYS:
        raise ValueError(f"{where}.type: one of {', '.join(FORMAT_KEYS)}, got {kind!r}")
    only_fields(fmt, FORMAT_KEYS[kind] | {"type"}, where)
    missing = sorted(REQUIRED.get(kind, set()) - set(fmt))
    if missing:
        raise ValueError(f"{where}: a {kind} needs {', '.join(missing)}")
    for key in ("value", "pattern", "grammar", "begin", "end", "separator"):
        if key in fmt and not isinstance(fmt[key], str):
            raise ValueError(f"{where}.{key}: a string")
    if kind in ("sequence", "or"):
        if not isinstance(fmt["elements"], list) or not fmt["elements"]:
            raise ValueError(f"{where}.elements: a non-empty list")
        for i, element in enumerate(fmt["elements"]):
            _check(element, f"{where}.elements[{i}]")
    if kind == "tag":
        _check(fmt["content"], f"{where}.content")
    if kind in ("triggered_tags", "tags_with_separator"):
        _check_tags(fmt, where)


def _check_tags(fmt: dict, where: str) -> None:
    tags = fmt["tags"]
    if not isinstance(tags, list) or not tags:
        raise ValueError(f"{where}.tags: a non-empty list of tags")
    for i, tag in enumerate(tags):
        if not isinstance(tag, dict):
            raise ValueError(f"{where}.tags[{i}]: a tag object")
        _check({"type": "tag", **tag}, f"{where}.tags[{i}]")
    if fmt["type"] == "triggered_tags":
        triggers = fmt["triggers"]
        if not isinstance(triggers, list) or not triggers or not all(isinstance(t, str) and t for t in triggers):
            raise ValueError(f"{where}.triggers: a non-empty list of non-empty strings")
        for i, tag in enumerate(tags):
            if not any(tag["begin"].startswith(t) for t in triggers):
                raise ValueError(f"{where}.tags[{i}].begin: {tag['begin']!r} starts with none of the triggers")


class LarkWriter:
    """FORMAT -> Lark rules; `json_rule(schema)` writes a JSON schema's rule body (the caller's style),
    `side(grammar)` registers a grammar of its own and returns its reference."""

    def __init__(self, json_rule, side):
        self.rules: list[str] = []
        self.json_rule, self.side = json_rule, side

    def grammar(self, fmt: dict) -> str:
        self.rules = []
        root = self.element(fmt)
        return "\n".join([f"start: {root}", *self.rules])

    def _name(self) -> str:
        return f"st_{len(self.rules)}"

    def _add(self, body: str, lazy: bool = False) -> str:
        """A new rule; `lazy`: its body is one lexeme that ends at its first match (text up to a string)."""
        name = self._name()
        self.rules.append(f"{name}{'[lazy]' if lazy else ''}: {body}")
        return name

    def element(self, fmt: dict) -> str:
        """A rule for `fmt`."""
        kind = fmt["type"]
        if kind == "const_string":
            return self._add(json.dumps(fmt["value"])) if fmt["value"] else self._add("")
        if kind == "json_schema":
            return self._add(self.json_rule(fmt["json_schema"]))
        if kind == "any_text":
            return self._add(TEXT)
        if kind == "regex":
            return self._add("/" + slashes(fmt["pattern"]) + "/")
        if kind == "grammar":
            return self._add(self.side(fmt["grammar"]))
        if kind == "sequence":
            return self._add(" ".join(self.element(e) for e in fmt["elements"]))
        if kind == "or":
            return self._add(" | ".join(self.element(e) for e in fmt["elements"]))
        if kind == "tag":
            return self._tag(fmt)
        return self._tags(fmt)

    def _tag(self, tag: dict, skip: int = 0) -> str:
        """begin (less its first `skip` characters: the trigger, already taken), content, end."""
        begin = tag["begin"][skip:]
        if tag["content"]["type"] == "any_text" and tag["end"]:
            body = self._add(f"{TEXT} {_literal(tag['end'])}", lazy=True)   # the text and its end, one lexeme
            return self._add(" ".join(p for p in (_literal(begin), body) if p))
        content = self.element(tag["content"])
        return self._add(" ".join(p for p in (_literal(begin), content, _literal(tag["end"])) if p))

    def _tags(self, fmt: dict) -> str:
        tags = [{"type": "tag", **t} for t in fmt["tags"]]
        many = not fmt.get("stop_after_first", False)
        least = fmt.get("at_least_one", False)
        if fmt["type"] == "tags_with_separator":
            one = self._add(" | ".join(self._tag(t) for t in tags))
            sep = _literal(fmt["separator"])
            body = f"{one} ({sep} {one})*" if many else one
            return self._add(body if least else f"({body})?")
        triggers = fmt["triggers"]
        options = []
        for tag in tags:
            trigger = max((t for t in triggers if tag["begin"].startswith(t)), key=len)
            head = self._add(f"{TEXT} {_literal(trigger)}", lazy=True)     # free text up to the trigger
            options.append(self._add(f"{head} {self._tag(tag, skip=len(trigger))}"))
        one = self._add(" | ".join(options))
        tail = f"ST_TAIL_{len(self.rules)}"
        self.rules.append(f"{tail}: {_text_without(triggers)}")
        if many:
            return self._add(f"{one}{'+' if least else '*'} {tail}")
        return self._add(f"{one} {tail}" if least else f"{one} {tail} | {tail}")


def _literal(text: str) -> str:
    return json.dumps(text) if text else ""


def _text_without(triggers: list[str]) -> str:
    """A terminal of free text that holds none of the triggers (a trigger always opens a tag)."""
    banned = "|".join(_escape(t) for t in triggers)
    return f"{TEXT} & ~/(?s:.*(?:{banned}).*)/"


def _escape(text: str) -> str:
    """A literal inside a regex between Lark's slashes."""
    return "".join("\\" + c if c in META else c for c in text)


def slashes(regex: str) -> str:
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
