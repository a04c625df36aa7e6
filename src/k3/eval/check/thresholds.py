"""Requirements a deployment must meet, as people write them: `humaneval.pass@1>=0.8`, `ttft.p90<=2s`,
`tpot.p50<=100ms`, `peak_rss<=64GB`. Each is NAME OP VALUE[UNIT]; times take s or ms (seconds without a
unit), memory takes B, KB/MB/GB/TB or KiB/MiB/GiB/TiB (bytes without one). A file holds one a line (`#`
comments) or a JSON list of them."""

from __future__ import annotations

import json
import operator
import re
from dataclasses import dataclass
from pathlib import Path

from k3.config.units import parse_size

OPS = {">=": operator.ge, "<=": operator.le, ">": operator.gt, "<": operator.lt, "==": operator.eq}
PATTERN = re.compile(r"^\s*([A-Za-z0-9_.@/-]+)\s*(>=|<=|==|>|<)\s*([0-9.eE+-]+)\s*([A-Za-z]*)\s*$")
TIME_UNITS = {"": 1.0, "s": 1.0, "ms": 1e-3}
LATENCIES = ("ttft", "ttfvt", "tpot", "e2el", "itl")


@dataclass(frozen=True)
class Requirement:
    name: str
    op: str
    value: float          # in seconds or bytes where the name is a time or a size
    text: str             # as the user wrote it

    def holds(self, measured: float) -> bool:
        return OPS[self.op](measured, self.value)


def parse(text: str) -> Requirement:
    m = PATTERN.match(text)
    if not m:
        raise ValueError(f"--require {text!r}: expected NAME OP VALUE, such as ttft.p90<=2s or humaneval.pass@1>=0.8")
    name, op, number, unit = m.groups()
    try:
        value = float(number)
    except ValueError:
        raise ValueError(f"--require {text!r}: {number!r} is not a number") from None
    if name.split(".")[0] in LATENCIES:
        if unit.lower() not in TIME_UNITS:
            raise ValueError(f"--require {text!r}: a time takes s or ms, not {unit!r}")
        value *= TIME_UNITS[unit.lower()]
    elif name in ("peak_rss", "peak_gpu_memory"):
        value = float(parse_size(f"{number}{unit}" if unit else str(int(value)), f"--require {name}"))
    elif unit:
        raise ValueError(f"--require {text!r}: {name} is a plain number; drop the unit {unit!r}")
    return Requirement(name, op, value, text.strip())


def load(texts: list[str] | None, path: str | None) -> list[Requirement]:
    items = list(texts or [])
    if path:
        raw = Path(path).read_text()
        try:
            listed = json.loads(raw)
            items += listed if isinstance(listed, list) else []
        except ValueError:
            items += [line.split("#")[0].strip() for line in raw.splitlines() if line.split("#")[0].strip()]
    return [parse(t) for t in items]


def judge(requirements: list[Requirement], measured: dict[str, float]) -> list[dict]:
    """One row a requirement: PASS, FAIL, or MISSING (nothing measured under that name: a failure too)."""
    rows = []
    for r in requirements:
        value = measured.get(r.name)
        status = "MISSING" if value is None else ("PASS" if r.holds(value) else "FAIL")
        rows.append({"requirement": r.text, "name": r.name, "measured": value, "status": status})
    return rows
