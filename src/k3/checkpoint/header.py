"""Safetensors headers read defensively: the length field is bounded before anything is allocated,
and every entry is checked (known dtype, bytes = shape x dtype size, offsets contiguous, data section
exactly as long as the file). Hostile or truncated files get a `CheckpointError` saying which.

Layout: 8-byte little-endian header length n, n bytes of JSON, then the data section; each entry's
`data_offsets` are relative to the data section and must tile it without holes or overlaps.
"""

from __future__ import annotations

import json
import math
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from k3.checkpoint.errors import CheckpointError

# Real K3 shards have ~5,200 tensors (~1 MB of JSON); safetensors itself caps headers at 100 MB.
MAX_HEADER_BYTES = 100 * 2 ** 20
DTYPE_SIZES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "I16": 2, "U16": 2,
               "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8}


class TensorEntry(NamedTuple):       # a tuple: 300,000 of them are made per huge header
    name: str
    dtype: str
    shape: tuple[int, ...]
    start: int  # absolute byte offset in the file
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class ShardHeader:
    file: str
    file_size: int
    header_len: int
    entries: dict[str, TensorEntry]
    metadata: dict


def read_header(path: str | Path, *, name: str | None = None, max_header: int = MAX_HEADER_BYTES) -> ShardHeader:
    """Parse and validate the header of one safetensors file (reads only the header bytes)."""
    path = Path(path)
    name = name or path.name
    size = os.stat(path).st_size
    if size < 8:
        raise CheckpointError(f"file is {size} bytes, shorter than a safetensors length field: truncated; "
                              "re-download it", file=name)
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        if n > max_header:
            raise CheckpointError(f"header length field says {n:,} bytes, over the {max_header:,}-byte limit: "
                                  "the file is corrupt or hostile; re-download it", file=name)
        if 8 + n > size:
            raise CheckpointError(f"header length field says {n:,} bytes but the file has only {size:,}: "
                                  "truncated; re-download it", file=name)
        raw = f.read(n)
    try:
        header = json.loads(raw, object_pairs_hook=_unique)
    except DuplicateKey as e:
        raise CheckpointError(f"header names {e.args[0]!r} twice (which of its entries holds the data is "
                              "ambiguous); the file is corrupt or hostile - re-download it",
                              file=name) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"header is not valid JSON ({e}); the file is corrupt - re-download it",
                              file=name) from None
    except RecursionError:
        raise CheckpointError("header is JSON nested too deeply to be a safetensors header; the file is corrupt "
                              "or hostile - re-download it", file=name) from None
    if not isinstance(header, dict):
        raise CheckpointError("header is not a JSON object; the file is corrupt - re-download it", file=name)
    metadata = header.pop("__metadata__", None) or {}
    entries = {k: _entry(name, k, v, 8 + n) for k, v in header.items()}
    _check_tiling(name, entries, 8 + n, data_len=size - 8 - n)
    return ShardHeader(name, size, n, entries, metadata if isinstance(metadata, dict) else {})


class DuplicateKey(ValueError):
    pass


def _unique(pairs: list[tuple[str, object]]) -> dict:
    """json's object hook: a key given twice (json.loads would keep the last silently) is an error."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen = set()
        raise DuplicateKey(next(k for k, _ in pairs if k in seen or seen.add(k)))
    return out


def _entry(file: str, key: str, v, base: int) -> TensorEntry:
    """The entry, checked; the common well-formed case in one pass (a header may hold 300,000), any other
    case through _refuse, which names what is wrong."""
    try:
        dtype, shape, (start, end) = v["dtype"], v["shape"], v["data_offsets"]
        n = DTYPE_SIZES[dtype]
    except (TypeError, KeyError, ValueError):
        _refuse(file, key, v)
    if type(shape) is list and type(start) is int and type(end) is int and 0 <= start <= end:
        for d in shape:
            if type(d) is not int or d < 0:
                _refuse(file, key, v)
            n *= d
        if end - start == n:
            return TensorEntry(key, dtype, tuple(shape), base + start, base + end)
    _refuse(file, key, v)


def _refuse(file: str, key: str, v) -> None:
    """Raise the CheckpointError that names what is wrong with a malformed entry."""
    def bad(why: str) -> CheckpointError:
        return CheckpointError(f"malformed header entry: {why}; the file is corrupt - re-download it",
                               file=file, tensor=key)

    if not isinstance(v, dict):
        raise bad("not an object")
    dtype, shape, offsets = v.get("dtype"), v.get("shape"), v.get("data_offsets")
    if dtype not in DTYPE_SIZES:
        raise bad(f"unknown dtype {dtype!r}")
    if not (isinstance(shape, list) and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                           for d in shape)):
        raise bad(f"shape {shape!r} is not a list of non-negative integers")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(type(o) is int and o >= 0 for o in offsets)
            and offsets[0] <= offsets[1]):
        raise bad(f"data_offsets {offsets!r} are not [start, end] with 0 <= start <= end")
    expected = math.prod(shape) * DTYPE_SIZES[dtype]
    raise bad(f"{offsets[1] - offsets[0]:,} data bytes for shape {shape} {dtype} ({expected:,} expected)")


def _check_tiling(file: str, entries: dict[str, TensorEntry], base: int, data_len: int) -> None:
    """Entries must cover the data section exactly: no overlap (aliasing), no gap, no tail."""
    pos = base
    for e in sorted(entries.values(), key=lambda e: (e.start, e.end)):
        if e.start < pos:
            raise CheckpointError("tensor data overlaps the previous tensor's: the file is corrupt or hostile",
                                  file=file, tensor=e.name)
        if e.start > pos:
            raise CheckpointError("gap in the data section before this tensor: the file is corrupt",
                                  file=file, tensor=e.name)
        pos = e.end
    described = pos - base
    if described > data_len:
        raise CheckpointError(f"the header describes {described:,} data bytes but the file holds {data_len:,}: "
                              "truncated; re-download it", file=file)
    if described < data_len:
        raise CheckpointError(f"{data_len - described:,} bytes after the last tensor: the file is corrupt or "
                              "from a different revision; re-download it", file=file)
