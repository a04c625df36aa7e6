"""/proc/cpuinfo's fields, read where a choice or a record depends on the CPU (the native kernels and their
tuning, evaluation provenance, benchmark records)."""

from __future__ import annotations

from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")


def fields() -> dict[str, str]:
    """Each `name : value` line's value, the first of each name (the first CPU's); {} without the file."""
    try:
        text = CPUINFO.read_text()
    except OSError:
        return {}
    out: dict[str, str] = {}
    for line in text.splitlines():
        name, sep, value = line.partition(":")
        if sep:
            out.setdefault(name.strip(), value.strip())
    return out


def field(name: str) -> str:
    """The first `name : value` line's value ("" when there is none or no file)."""
    return fields().get(name, "")
