"""Requirements a deployment must meet, as people write them: `humaneval.pass@1>=0.8`, `ttft.p90<=2s`,
`tpot.p50<=100ms`, `peak_rss<=64GB`. Each is NAME OP VALUE[UNIT] over the names of metrics/names.py; times
take s or ms (seconds without a unit), memory takes B, KB/MB/GB/TB or KiB/MiB/GiB/TiB (bytes without one).
A file holds one a line (`#` comments) or a JSON list of them.

A requirement is decided on the measured value's 95 % interval, not its point: it PASSES when the whole
interval clears the threshold, FAILS when the whole interval misses it, and is INCONCLUSIVE otherwise,
with the n that would decide it if the value held (3 of 3 answers passing do not show pass@1 >= 0.8).
A single reading (peak memory, a count, a throughput) is decided on its value. A metric with nothing to
measure (n = 0: every answer cut, no unsafe prompt drawn) is INCONCLUSIVE, never a pass or a fail."""

from __future__ import annotations

import json
import operator
import re
from dataclasses import dataclass
from pathlib import Path

from k3.config.units import parse_size
from k3.eval.metrics.names import LATENCIES

OPS = {">=": operator.ge, "<=": operator.le, ">": operator.gt, "<": operator.lt, "==": operator.eq}
PATTERN = re.compile(r"^\s*([A-Za-z0-9_.@/-]+)\s*(>=|<=|==|>|<)\s*([0-9.eE+-]+)\s*([A-Za-z]*)\s*$")
TIME_UNITS = {"": 1.0, "s": 1.0, "ms": 1e-3}
ORDER = ("PASS", "INCONCLUSIVE", "FAIL", "ERROR")     # verdicts, better to worse


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


def decide(r: Requirement, m) -> dict:
    """One requirement against its Measured (metrics/measured.py, or None) -> its row: status, the value, its
    interval and n, and for an undecided one the n that would decide it and why."""
    row = {"requirement": r.text, "name": r.name, "measured": None, "n": 0, "ci95": [None, None], "status": "INCONCLUSIVE",
           "needed_n": None, "why": "nothing was measured for it (n = 0)"}
    if m is None or m.value is None or m.n == 0:
        return row
    row |= {"measured": m.value, "n": m.n, "ci95": [m.low, m.high], "why": None}
    if m.kind == "point":
        row["status"] = "PASS" if r.holds(m.value) else "FAIL"
        return row
    if r.op == "==":
        holds, misses = m.low == m.high == r.value, not _within(r.value, m.low, m.high)
    else:
        upper = r.op in ("<=", "<")        # the bound that must clear: the high end for <=, the low end for >=
        sure, other = (m.high, m.low) if upper else (m.low, m.high)
        holds = sure is not None and r.holds(sure)
        misses = other is not None and not r.holds(other)
    if holds or misses:
        row["status"] = "PASS" if holds else "FAIL"
        return row
    row["needed_n"] = m.needed(r.value)
    row["why"] = (f"the 95 % interval [{_num(m.low)}, {_num(m.high)}] over n = {m.n} holds {r.value:g}; "
                  + (f"about n = {row['needed_n']} would decide it if the value held" if row["needed_n"]
                     else "no n decides it while the value sits on the threshold"))
    return row


def judge(requirements: list[Requirement], measured: dict) -> list[dict]:
    """One row a requirement (see decide)."""
    return [decide(r, measured.get(r.name)) for r in requirements]


def verdict(rows: list[dict]) -> str:
    """FAIL when any requirement fails, else INCONCLUSIVE when any is undecided, else PASS."""
    return worst("PASS", *(row["status"] for row in rows))


def worst(*verdicts: str) -> str:
    """The verdict of two runs together (a comparison, a sweep and its check): the worse of them."""
    return max(verdicts, key=ORDER.index)


def _within(value: float, low, high) -> bool:
    return (low is None or low <= value) and (high is None or value <= high)


def _num(v) -> str:
    return "unbounded" if v is None else f"{v:.4g}"
