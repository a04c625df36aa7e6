"""What a constraint may ask of the grammar library, checked before any of it reaches llguidance.

llguidance compiles `$ref`s and rule chains recursively: a schema whose references nest about 1,000
deep (each definition holding a `$ref` to the next, directly or inside its properties), or a Lark
grammar of about 3,000 rules each naming the next, overflows its stack and kills the process
(measured with an 8 MiB stack; the server's threads have the same). So the cap is on how deep
references nest, not on how many there are: a configuration-file schema with 700 `$ref`s nests a
dozen deep. These caps sit well below the crash and well above what real schemas and grammars use,
and each refusal names the cap. The server also validates in a separate process
(serve/grammar_check.py), so a crash these caps miss costs a 400, not the server."""

from __future__ import annotations

import re

from k3.chat.validate import MAX_TOOLS

MAX_REF_DEPTH = 256          # `$ref`s nested in one another (the crash is at about 1,000)
MAX_SCHEMA_NODES = 200_000   # objects and arrays in one schema (compile time: benchmarks/schema_corpus.py)
MAX_RULES = 1_000            # rules in a user's Lark grammar
MAX_CHOICES = 20_000         # strings of a `choice` (compiled in 0.4 s at the cap; a regex takes more)
MAX_CHOICE_BYTES = 256 << 10
MAX_TEXT = 256 << 10         # characters of a regex or grammar
RULE = re.compile(r"(?m)^\s*[?!]?[A-Za-z_][A-Za-z_0-9]*(?:\.-?\d+)?\s*:")


def json_nodes(value):
    """Every object and array in a JSON value, the value itself first when it is one. Iterative: the values
    this walks include ones nested too deep for recursion."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, (dict, list)):
            yield item
            stack.extend(item.values() if isinstance(item, dict) else item)


def check_schema(schema, where: str) -> None:
    """Raise ValueError when a JSON schema is past the caps (nodes, nesting of `$ref`s)."""
    for nodes, _ in enumerate(json_nodes(schema), 1):
        if nodes > MAX_SCHEMA_NODES:
            raise ValueError(f"{where}: a schema of more than {MAX_SCHEMA_NODES:,} objects and arrays is not accepted")
    roots = schema if isinstance(schema, list) else [schema]
    depth = max((ref_depth(root) for root in roots), default=0)
    if depth > MAX_REF_DEPTH:
        raise ValueError(f"{where}: `$ref`s nest {depth:,} deep, over the limit of {MAX_REF_DEPTH} (references nested "
                         "about 1,000 deep crash the grammar library); flatten the definitions")


def ref_depth(root) -> int:
    """How deep local `$ref`s nest from the root: the longest chain of definitions each reached through a
    `$ref` inside the one before (a reference back into the chain, recursion, ends it). Iterative: the
    schemas this guards against are the ones too deep for recursion."""
    memo: dict[str, int] = {}
    on_path: set[str] = set()
    frames = [("", local_refs(root), 0)]          # (pointer, refs left to follow, deepest child so far)
    while frames:
        pointer, refs, best = frames[-1]
        if refs:
            target = refs.pop()
            if target in memo:
                frames[-1] = (pointer, refs, max(best, memo[target]))
            elif target not in on_path:
                on_path.add(target)
                frames.append((target, local_refs(resolve(root, target)), 0))
            continue
        frames.pop()
        on_path.discard(pointer)
        memo[pointer] = best + (pointer != "")
        if frames:
            parent, left, deepest = frames[-1]
            frames[-1] = (parent, left, max(deepest, memo[pointer]))
    return memo[""]


def local_refs(node) -> list[str]:
    """The document-local `$ref` targets ("#/..." pointers) in a schema node, nested ones included."""
    refs = (item.get("$ref") for item in json_nodes(node) if isinstance(item, dict))
    return list(dict.fromkeys(ref[1:] for ref in refs if isinstance(ref, str) and ref.startswith("#")))


def resolve(root, pointer: str):
    node = root
    for part in pointer.lstrip("/").split("/") if pointer else []:
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


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
