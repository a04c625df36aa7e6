"""Human byte sizes: "24GB", "512MiB", "1.5 GiB", or a plain integer of bytes."""

from __future__ import annotations

import re

_UNITS = {"": 1, "b": 1, "kb": 10 ** 3, "mb": 10 ** 6, "gb": 10 ** 9, "tb": 10 ** 12,
          "kib": 2 ** 10, "mib": 2 ** 20, "gib": 2 ** 30, "tib": 2 ** 40}


def parse_size(value: int | str, name: str = "size") -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        if value <= 0:
            raise ValueError(f"{name}: must be > 0 bytes, got {value}")
        return value
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", str(value))
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(f"{name}: cannot read {value!r} as a size; write e.g. 24GB, 512MiB or a number of bytes")
    n = int(float(m.group(1)) * _UNITS[m.group(2).lower()])
    if n <= 0:
        raise ValueError(f"{name}: must be > 0 bytes, got {value!r}")
    return n
