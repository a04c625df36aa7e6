"""List-valued task arguments. `-T KEY=VALUE` reaches a task parsed: k3's as JSON where it parses, Inspect's
as YAML. So one list can arrive as text (`a,b`), as a list (`[1024, 2048]`) or, with one entry, as a bare
number (`lengths=1024`); every task reads its lists through here."""

from __future__ import annotations


def listed(value: object) -> list[str]:
    """`"a, b"` / `["a", "b"]` / `1024` -> the entries as stripped text, empty ones dropped."""
    if isinstance(value, (list, tuple)):
        parts = [str(v) for v in value]
    else:
        parts = str(value).split(",")
    return [p.strip() for p in parts if p.strip()]
