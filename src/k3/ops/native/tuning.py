"""The decode GEMV form for each row length, measured on the CPU at hand once and remembered.

The bf16 and int8 decode GEMVs read a weight in one of two forms (k3.ops.native.decode_gemv): tiles of
rows, or each thread's rows in order ("sequential"). Both give the same bits; which streams faster is a
property of the CPU's memory system and of the row's length, not of the CPU's vendor or instruction set:
on an Intel Ice Lake Xeon sequential read short rows faster and tiles long ones, where another AVX-512 Xeon
decoded faster in tiles and AMD's Zen 5 sequentially (decode_settings in docs/benchmarks/results.md).

So where K3_DECODE_GEMV does not choose, the forms take turns over bf16 weights at each row length of
LADDER, in a buffer larger than the last-level cache so that every pass streams from memory as decode
does. The row length up to which rows are read sequentially is the one that would have made the ladder's
passes fastest in all (`decide`); the caller's rule stands where the rows that split would move gain
less than TIE each. The answer is kept per CPU, kernel settings and thread count in
K3_NATIVE_CACHE/tuning.json beside the build it measured (`python -m k3.ops.native` measures ahead of
time, as make and CI run it), written to a temporary file and renamed.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch

from k3.ops import huge_pages
from k3.config import cpuinfo

ALWAYS = 1 << 40                         # a row length no weight reaches: every row sequential
FORMS = {"tiles": 0, "sequential": ALWAYS}   # K3_DECODE_GEMV's values, as row lengths
LADDER = (1024, 2048, 3072, 4096, 7168)  # bf16 columns of the rows measured (2 to 14 KB)
OUTPUTS = 4096                           # rows of each weight measured
TIE = 0.02
ROUNDS = 11                              # timed passes per form and row length, the order alternating
MIN_BYTES, MAX_BYTES = 256 << 20, 1 << 30
_measured: dict[tuple[Path, str], int] = {}   # this process's answers, should the file not be writable


def describe(row_bytes: int) -> str:
    """decode_gemv's value in words: "tiles", "sequential", or where the forms split."""
    if row_bytes <= 0:
        return "tiles"
    return "sequential" if row_bytes >= ALWAYS else f"sequential to {row_bytes // 1024} KB rows"


def last_level_cache_bytes() -> int:
    """The largest cache sysfs lists for cpu0 (else /proc/cpuinfo's "cache size"; else 32 MB)."""
    sizes = []
    for f in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = f.read_text().strip()
        unit = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        if text.rstrip("KMG").isdigit():
            sizes.append(int(text.rstrip("KMG")) * unit)
    words = [] if sizes else cpuinfo.field("cache size").split()   # "49152 KB"
    if words and words[0].isdigit():
        sizes.append(int(words[0]) << 10)
    return max(sizes, default=32 << 20)


def available_bytes() -> int:
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def budget_bytes() -> int:
    """Bytes of weights each pass streams: twice the last-level cache, at least MIN_BYTES, at most
    MAX_BYTES and an eighth of the memory available now (never under 16 MB)."""
    return max(16 << 20, min(max(MIN_BYTES, 2 * last_level_cache_bytes()), MAX_BYTES, available_bytes() // 8))


def time_ratio(kernels, buffer: torch.Tensor, K: int, rounds: int = ROUNDS) -> float:
    """The median round's tiles time over its sequential time for weights of [OUTPUTS, K] laid end to end
    in `buffer` (bf16; above 1: sequential is faster): one warm pass each, then `rounds` timed passes in
    turns. Leaves the setting as it found it."""
    per = OUTPUTS * K
    ws = [buffer[i * per:(i + 1) * per].view(OUTPUTS, K) for i in range(max(1, buffer.numel() // per))]
    x = torch.rand(1, K)

    def one_pass(row_bytes: int) -> float:
        kernels.set_gemv_sequential_bytes(row_bytes)
        start = time.perf_counter()
        for w in ws:
            kernels.bf16_linear(x, w)
        return time.perf_counter() - start

    before = kernels.set_gemv_sequential_bytes(0)
    try:
        one_pass(0), one_pass(ALWAYS)
        ratios = []
        for r in range(rounds):
            tiles_first = r % 2 == 0
            a = one_pass(0 if tiles_first else ALWAYS)
            b = one_pass(ALWAYS if tiles_first else 0)
            ratios.append(a / b if tiles_first else b / a)
        return statistics.median(ratios)
    finally:
        kernels.set_gemv_sequential_bytes(before)


def decide(ratios: dict[int, float], rule: int) -> int:
    """The longest row (bytes) to read sequentially, from {row bytes: tiles time / sequential time}: the
    split that makes the measured rows' time least (each row length counting alike), or `rule` unless
    the rows it reads in the other form gain more than TIE each on average. A split past the longest row
    measured means every row."""
    lengths = sorted(ratios)

    def cost(split: int) -> float:   # in sequential passes: 1 where read sequentially, the ratio in tiles
        return sum(1.0 if b <= split else ratios[b] for b in lengths)

    best = min([0, *lengths[:-1], ALWAYS], key=cost)
    moved = sum((b <= best) != (b <= rule) for b in lengths)
    return best if moved and cost(rule) - cost(best) > TIE * moved else rule


def cpu_key(settings: str, threads: int) -> str:
    """What a measurement holds for: the CPU (vendor, family, model, stepping, name), the kernels' settings
    that change how a weight streams (instruction set, prefetch hint: on an Ice Lake sequential rows under
    non-temporal prefetches were far slower than the tiles, under t0 faster) and the thread count."""
    fields = cpuinfo.fields()
    cpu = "/".join(fields.get(k, "?") for k in ("vendor_id", "cpu family", "model", "stepping", "model name"))
    return f"{cpu}; {settings}; threads {threads}"


def _load(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _remember(path: Path, key: str, entry: dict) -> None:
    data = _load(path) | {key: entry}
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(data, indent=1))
        os.replace(tmp, path)
    except OSError:
        pass   # an unwritable cache costs a measurement next time, nothing more


def measure(kernels, rule: int) -> dict:
    """The ladder's ratios on this CPU and the split they decide, as tuning.json keeps them."""
    nbytes = budget_bytes()
    buffer = huge_pages.empty((nbytes // 2,), torch.bfloat16)
    buffer.fill_(0.5)   # every page written, so no pass reads the shared zero page
    ratios = {2 * K: time_ratio(kernels, buffer, K) for K in LADDER}
    return {"sequential_row_bytes": decide(ratios, rule), "rule": rule, "bytes": nbytes,
            "tiles_over_sequential": {str(b): round(r, 4) for b, r in ratios.items()},
            "measured": time.strftime("%Y-%m-%d %H:%M:%S")}


def sequential_row_bytes(kernels, rule: int, path: Path, level: int, prefetch: str) -> int:
    """decode_gemv for this CPU at the kernels' instruction-set level and prefetch hint (as they are set
    now): the split remembered in `path`, else measured now (a second or two, once) and remembered;
    `rule` at the scalar level, which has one form."""
    if level < 1:
        return rule
    key = cpu_key(f"simd {level}; prefetch {prefetch}", torch.get_num_threads())
    entry = _load(path).get(key)
    if isinstance(entry, dict) and isinstance(entry.get("sequential_row_bytes"), int):
        return entry["sequential_row_bytes"]
    if (path, key) not in _measured:
        print("k3: measuring this CPU's decode GEMV forms, once (a second or two)", file=sys.stderr)
        try:
            entry = measure(kernels, rule)
        except (MemoryError, OSError, RuntimeError) as e:   # a speed choice: never worth failing the kernels for
            warnings.warn(f"k3: could not measure the decode GEMV forms ({type(e).__name__}: {e}); using "
                          f"{describe(rule)}", stacklevel=2)
            entry = {"sequential_row_bytes": rule}
        else:
            _remember(path, key, entry)
        _measured[path, key] = entry["sequential_row_bytes"]
    return _measured[path, key]
