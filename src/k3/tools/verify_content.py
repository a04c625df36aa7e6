"""Per-tensor checks for `k3 verify`: shape and dtype against the layout, MXFP4 scale bytes on disk."""

from __future__ import annotations

import os
from pathlib import Path

from k3.checkpoint.header import TensorEntry
from k3.checkpoint.layout import FLOAT_DTYPES, ExpectedTensor, a_log_stored_len
from k3.checkpoint.paths import member_path
from k3.config import K3Config
from k3.ops.mxfp4.format import E8M0_NAN

SCAN_BLOCK = 16 * 2 ** 20


def check_tensor_spec(config: K3Config, spec: ExpectedTensor, file: str, entry: TensorEntry, report) -> None:
    if spec.name.endswith("A_log"):
        ok = entry.shape in ((a_log_stored_len(config),), (config.kda_num_heads,),
                             (1, 1, config.kda_num_heads, 1))
        want = f"[{a_log_stored_len(config)}] (padded), [{config.kda_num_heads}] or [1, 1, {config.kda_num_heads}, 1]"
    else:
        ok, want = entry.shape == spec.shape, str(list(spec.shape))
    if not ok:
        report.add("shape", f"shape {list(entry.shape)}, config.json implies {want}", file, entry.name)
    if spec.dtype in ("U8", "I8"):
        if entry.dtype != spec.dtype:
            what = "packed MXFP4 (U8)" if spec.dtype == "U8" else "int8 trunk codes (I8)"
            report.add("dtype", f"{entry.dtype} where {what} is expected", file, entry.name)
    elif spec.params == 0 and spec.dtype == "BF16":   # an int8 trunk's scales: read as bf16, never converted
        if entry.dtype != "BF16":
            report.add("dtype", f"{entry.dtype} where int8 scales (BF16) are expected", file, entry.name)
    elif entry.dtype not in FLOAT_DTYPES:
        report.add("dtype", f"{entry.dtype} where a float ({spec.dtype} in the release) is expected", file, entry.name)
    elif entry.dtype != spec.dtype:
        report.warnings.append(f"{entry.name}: stored {entry.dtype}, the release has {spec.dtype} (loads; converted)")


def _by_file(found: dict[str, tuple[str, TensorEntry]], keep) -> dict[str, list[TensorEntry]]:
    """file -> the entries `keep(name, entry)` selects, in file order (files sorted, so reads are sequential)."""
    by_file: dict[str, list[TensorEntry]] = {}
    for name, (file, entry) in found.items():
        if keep(name, entry):
            by_file.setdefault(file, []).append(entry)
    return {file: sorted(entries, key=lambda e: e.start) for file, entries in sorted(by_file.items())}


def check_scales_on_disk(root: Path, found: dict[str, tuple[str, TensorEntry]], report) -> None:
    """Count E8M0 bytes equal to 255 (NaN) in every `weight_scale`, reading only the scale bytes."""
    by_file = _by_file(found, lambda name, e: name.endswith(".weight_scale") and e.dtype == "U8")
    for file, entries in by_file.items():
        fd = os.open(member_path(root, file), os.O_RDONLY)
        try:
            for e in entries:
                bad = _count_byte(fd, e.start, e.nbytes, E8M0_NAN)
                if bad:
                    report.add("mxfp4-scale", f"{bad} E8M0 scale byte(s) are 255 (NaN in OCP MX): corrupt; "
                               "re-download the shard", file, e.name)
        finally:
            os.close(fd)


def _count_byte(fd: int, start: int, length: int, value: int) -> int:
    count, pos = 0, start
    end = start + length
    while pos < end:
        block = os.pread(fd, min(SCAN_BLOCK, end - pos), pos)
        if not block:
            break
        count += block.count(value)
        pos += len(block)
    return count


# dtype -> (unsigned view, exponent mask, mantissa mask): all-ones exponent is Inf (mantissa 0) or NaN.
FLOAT_BITS = {"BF16": ("<u2", 0x7F80, 0x007F), "F16": ("<u2", 0x7C00, 0x03FF),
              "F32": ("<u4", 0x7F800000, 0x007FFFFF)}


def scan_non_finite(root: Path, found: dict[str, tuple[str, TensorEntry]], report, progress=None) -> None:
    """`k3 verify --scan`: read every BF16/F16/F32 tensor and report, by tensor, how many values are
    NaN or Inf. Reads in SCAN_BLOCK pieces through the page cache; memory stays at one block."""
    import numpy as np

    for file, entries in _by_file(found, lambda name, e: e.dtype in FLOAT_BITS).items():
        with open(member_path(root, file), "rb") as f:
            for e in entries:
                view, exp, mant = FLOAT_BITS[e.dtype]
                width = np.dtype(view).itemsize
                nan = inf = 0
                for start in range(e.start, e.end, SCAN_BLOCK):    # SCAN_BLOCK is a multiple of every width
                    f.seek(start)
                    bits = np.frombuffer(f.read(min(SCAN_BLOCK, e.end - start)), dtype=view)
                    special = (bits & exp) == exp
                    n_nan = int(np.count_nonzero(special & ((bits & mant) != 0)))
                    nan, inf = nan + n_nan, inf + int(np.count_nonzero(special)) - n_nan
                    if progress is not None:
                        progress(bits.nbytes)
                if nan or inf:
                    report.add("non-finite", f"{nan:,} NaN and {inf:,} Inf of {e.nbytes // width:,} {e.dtype} values; "
                               "the weights are corrupt or were saved after a diverged step", file, e.name)
    report.scanned = True
