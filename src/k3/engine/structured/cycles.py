"""Recursive `$ref`s beside other keywords, loosened for the grammar library.

The library intersects a `$ref` with the keywords beside it, and cannot when the reference is
recursive (it refuses: "circular references with sibling keys are not supported"). Configuration-file
schemas do this (CircleCI's `logic`, Renovate's root). Where it happens the keywords beside the `$ref`
are dropped for the grammar, which then allows a superset, and the check after generation (check.py)
holds the output to the whole schema. Only document-local references ("#/...") are followed.
"""

from __future__ import annotations

from k3.engine.structured.bounds import json_nodes, local_refs, resolve
from k3.engine.structured.finite import CONSTRAINING


def loosen_cyclic_refs(schema):
    """A copy of `schema` in which a recursive `$ref` keeps no constraining keyword beside it."""
    if not isinstance(schema, dict):
        return schema
    cyclic = _cyclic_targets(schema)
    if not cyclic:
        return schema

    def walk(node):
        if isinstance(node, list):
            return [walk(v) for v in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#") and ref[1:] in cyclic:
            node = {k: v for k, v in node.items() if k == "$ref" or k not in CONSTRAINING}
        return {k: walk(v) for k, v in node.items()}

    return walk(schema)


def _cyclic_targets(root: dict) -> set[str]:
    """The pointers that a `$ref` beside other keywords names and that reach themselves through `$ref`s,
    or reach the root (a `#` reference)."""
    sited = {item["$ref"][1:] for item in json_nodes(root) if isinstance(item, dict)
             and isinstance(item.get("$ref"), str) and item["$ref"].startswith("#")
             and len(CONSTRAINING.intersection(item)) > 1}
    edges: dict[str, list[str]] = {}
    return {target for target in sited if _reaches(root, target, edges)}


def _reaches(root: dict, start: str, edges: dict) -> bool:
    seen, todo = set(), [start]
    while todo:
        pointer = todo.pop()
        if pointer not in edges:
            edges[pointer] = local_refs(resolve(root, pointer))
        for nxt in edges[pointer]:
            if nxt == start or nxt == "":
                return True
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return False
