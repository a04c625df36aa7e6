"""Per-tensor checks for `k3 verify`: shape and dtype against the layout, MXFP4 scale bytes on disk."""

from __future__ import annotations

import os
from pathlib import Path

from k3.checkpoint.header import TensorEntry
from k3.checkpoint.layout import FLOAT_DTYPES, TensorSpec, a_log_stored_len
from k3.checkpoint.paths import member_path
from k3.config import K3Config
from k3.ops.mxfp4.format import E8M0_NAN

SCAN_BLOCK = 16 * 2 ** 20


def check_tensor_spec(config: K3Config, spec: TensorSpec, file: str, entry: TensorEntry, report) -> None:
    if spec.name.endswith("A_log"):
        ok = entry.shape in ((a_log_stored_len(config),), (config.kda_num_heads,),
                             (1, 1, config.kda_num_heads, 1))
        want = f"[{a_log_stored_len(config)}] (padded), [{config.kda_num_heads}] or [1, 1, {config.kda_num_heads}, 1]"
    else:
        ok, want = entry.shape == spec.shape, str(list(spec.shape))
    if not ok:
        report.add("shape", f"shape {list(entry.shape)}, config.json implies {want}", file, entry.name)
    if spec.dtype == "U8":
        if entry.dtype != "U8":
            report.add("dtype", f"{entry.dtype} where packed MXFP4 (U8) is expected", file, entry.name)
    elif entry.dtype not in FLOAT_DTYPES:
        report.add("dtype", f"{entry.dtype} where a float ({spec.dtype} in the release) is expected", file, entry.name)
    elif entry.dtype != spec.dtype:
        report.warnings.append(f"{entry.name}: stored {entry.dtype}, the release has {spec.dtype} (loads; converted)")


def check_scales_on_disk(root: Path, found: dict[str, tuple[str, TensorEntry]], report) -> None:
    """Count E8M0 bytes equal to 255 (NaN) in every `weight_scale`, reading only the scale bytes."""
    by_file: dict[str, list[TensorEntry]] = {}
    for name, (file, entry) in found.items():
        if name.endswith(".weight_scale") and entry.dtype == "U8":
            by_file.setdefault(file, []).append(entry)
    for file, entries in sorted(by_file.items()):
        fd = os.open(member_path(root, file), os.O_RDONLY)
        try:
            for e in sorted(entries, key=lambda e: e.start):
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
