"""JSON Schema's strings as validators read them, rewritten for the grammar library before a schema is compiled.

Patterns are ECMA-262 regular expressions: without the `u` flag `\\d` is [0-9] and `\\w` is [A-Za-z0-9_]; the
library's regex engine takes them as Unicode classes and would let `೪23٠` through a `^\\d+$`. Each `pattern`
and `patternProperties` key is rewritten to the ASCII classes (`\\s` is Unicode in both, and is left alone).

Formats: where the library's own regex for a `format` lets through strings that validators reject (29 February
of any year, a leap second at any minute, an e-mail local part over 64 characters or a domain label over 63),
the format becomes a pattern that allows only strings every validator accepts (jsonschema-rs and Python's
jsonschema checked in tests/engine/test_tool_schemas.py). The narrowing is deliberate: a constrained output
must validate; that it cannot be every valid string (a quoted e-mail local part, the year 0000) costs nothing.
"""

from __future__ import annotations

ASCII = {"d": "0-9", "w": "A-Za-z0-9_"}

_LEAP = "([1-9][0-9](0[48]|[2468][048]|[13579][26])|([2468][048]|[13579][26])00)"
_DATE = ("([1-9][0-9]{3}-((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|(0[469]|11)-(0[1-9]|[12][0-9]|30)"
         f"|02-(0[1-9]|1[0-9]|2[0-8]))|{_LEAP}-02-29)")
_TIME = "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])"
_LABEL = "[A-Za-z0-9]([A-Za-z0-9-]{0,30}[A-Za-z0-9])?"
FORMATS = {
    "date": f"^{_DATE}$",
    "time": f"^{_TIME}$",
    "date-time": f"^{_DATE}T{_TIME}$",
    "email": f"^[A-Za-z0-9_%+-]{{1,64}}@({_LABEL}\\.){{1,4}}[A-Za-z]{{2,24}}$",
}


def ascii_classes(pattern: str) -> str:
    """`\\d` -> [0-9], `\\D` -> [^0-9], `\\w`/`\\W` alike; inside a [...] class the lower-case ones become
    ranges (the upper-case ones are left: a negation inside a class has no plain spelling)."""
    out, i, in_class = [], 0, False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            n = pattern[i + 1]
            if n.lower() in ASCII and not (in_class and n.isupper()):
                body = ASCII[n.lower()]
                out.append(body if in_class else f"[{body}]" if n.islower() else f"[^{body}]")
            else:
                out.append(c + n)
            i += 2
            continue
        if c == "[" and not in_class:
            in_class = True
        elif c == "]" and in_class:
            in_class = False
        out.append(c)
        i += 1
    return "".join(out)


def ecma_patterns(schema):
    """A copy of `schema` with every pattern (and patternProperties key) in ASCII classes, and the FORMATS
    as patterns (beside a pattern of its own, through allOf: the library intersects them)."""
    if isinstance(schema, list):
        return [ecma_patterns(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, value in schema.items():
        if key == "pattern" and isinstance(value, str):
            out[key] = ascii_classes(value)
        elif key == "patternProperties" and isinstance(value, dict):
            out[key] = {ascii_classes(k): ecma_patterns(v) for k, v in value.items()}
        elif key in ("properties", "$defs", "definitions", "dependentSchemas") and isinstance(value, dict):
            out[key] = {k: ecma_patterns(v) for k, v in value.items()}   # names, not patterns
        else:
            out[key] = ecma_patterns(value)
    fmt = out.get("format")
    if isinstance(fmt, str) and fmt in FORMATS:
        del out["format"]
        if "pattern" in out:
            out["allOf"] = [*out.get("allOf", []), {"pattern": FORMATS[fmt]}]
        else:
            out["pattern"] = FORMATS[fmt]
    return out
