"""What a constraint may ask of the grammar library, checked before any of it reaches llguidance.

llguidance walks `$ref` chains and rule chains recursively: a schema whose `$ref`s chain about 3,000
deep, or a Lark grammar of about 3,000 rules each naming the next, overflows its stack and kills the
process (measured with an 8 MiB stack; the server's threads have the same). These caps sit well
below that and well above what real schemas and grammars use, and each refusal names the cap.
The server also validates in a separate process (serve/grammar_check.py), so a crash these caps
miss costs a 400, not the server."""

from __future__ import annotations

import re

from k3.chat.validate import MAX_TOOLS

MAX_REFS = 512               # `$ref`s in one schema (all tools of a request together)
MAX_SCHEMA_NODES = 20_000    # objects and arrays in one schema
MAX_RULES = 1_000            # rules in a user's Lark grammar
MAX_CHOICES = 20_000         # strings of a `choice` (compiled in 0.4 s at the cap; a regex takes more)
MAX_CHOICE_BYTES = 256 << 10
MAX_TEXT = 256 << 10         # characters of a regex or grammar
RULE = re.compile(r"(?m)^\s*[?!]?[A-Za-z_][A-Za-z_0-9]*(?:\.-?\d+)?\s*:")


def check_schema(schema, where: str) -> None:
    """Raise ValueError when a JSON schema is past the caps (nodes, `$ref`s)."""
    nodes = refs = 0
    stack = [schema]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            nodes += 1
            refs += "$ref" in item
            stack.extend(item.values())
        elif isinstance(item, list):
            nodes += 1
            stack.extend(item)
        if nodes > MAX_SCHEMA_NODES:
            raise ValueError(f"{where}: a schema of more than {MAX_SCHEMA_NODES:,} objects and arrays is not accepted")
    if refs > MAX_REFS:
        raise ValueError(f"{where}: {refs:,} `$ref`s is over the limit of {MAX_REFS} (long `$ref` chains crash "
                         "the grammar library); inline the definitions or simplify the schema")


def check_text(text: str, where: str, grammar: bool = False) -> None:
    if len(text) > MAX_TEXT:
        raise ValueError(f"{where}: {len(text):,} characters is over the limit of {MAX_TEXT:,}")
    if grammar:
        rules = len(RULE.findall(text))
        if rules > MAX_RULES:
            raise ValueError(f"{where}: {rules:,} rules is over the limit of {MAX_RULES:,}")


def check_choice(choice, where: str) -> None:
    if len(choice) > MAX_CHOICES:
        raise ValueError(f"{where}: {len(choice):,} strings is over the limit of {MAX_CHOICES:,}; for more, "
                         "give a regex or a Lark grammar")
    if sum(len(c) for c in choice if isinstance(c, str)) > MAX_CHOICE_BYTES:
        raise ValueError(f"{where}: the strings add up to more than {MAX_CHOICE_BYTES:,} characters")


def check_tools(tools, where: str = "tools") -> None:
    if len(tools) > MAX_TOOLS:
        raise ValueError(f"{where}: {len(tools):,} tools is over the limit of {MAX_TOOLS}")
    check_schema([schema for _, schema in tools], f"{where} (parameters)")
