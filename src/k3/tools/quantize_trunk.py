"""`k3 quantize IN OUT --trunk int8`: the trunk's projection matrices as int8 with per-32 bf16 scales.

OUT is an overlay of IN: new shards `int8-<IN shard>` hold only the quantised matrices (`weight` I8,
`weight_scale` BF16: compressed-tensors' int-quantized layout), IN's shards are hard-linked beside
them unchanged (or copied with copy=True), and the index points each tensor at its file. So the
released model's derived checkpoint costs its int8 trunk (about 60 GB) on disk, not another 1.5 TB of
experts. Which matrices: k3.checkpoint.layout.int8_target (not the router, kv_b_proj, embedding or
lm_head). Streams one matrix at a time; shards are written under temporary names and renamed, the index
then the config last, so a cut run leaves no checkpoint that looks finished.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
from dataclasses import replace
from pathlib import Path

import torch
from safetensors import safe_open

from k3.checkpoint.errors import CheckpointError
from k3.checkpoint.header import read_header
from k3.checkpoint.layout import FLOAT_DTYPES, expected_tensors, int8_target
from k3.checkpoint.reader import INDEX_FILE, shard_map, text_name
from k3.checkpoint.stream_writer import StreamingShardWriter
from k3.checkpoint.writer import atomic_write_text
from k3.config.hf import load_config
from k3.config.quant import quantization_config
from k3.ops.int8 import Int8FormatError, dequantize, quantize, scale_shape
from k3.tools.quantize import QuantizeReport, TensorError


def quantize_trunk(src: str | Path, dst: str | Path, *, copy: bool = False, log=print,
                   tick=lambda nbytes: None) -> QuantizeReport:
    """`tick(nbytes)` after each quantised matrix (progress over `trunk_source_bytes`)."""
    src, dst = Path(src), Path(dst)
    config = load_config(src)
    if config.trunk_format == "int8":
        raise ValueError(f"{src} already has an int8 trunk")
    if dst.resolve() == src.resolve():
        raise ValueError("OUT must differ from IN: quantize writes a new checkpoint")
    if dst.exists() and any(dst.iterdir()):
        raise ValueError(f"{dst} is not empty; choose a new directory")
    dst.mkdir(parents=True, exist_ok=True)
    targets = _targets(config)
    report = QuantizeReport(errors=[])
    weight_map: dict[str, str] = {}
    for file, stored_names in sorted(shard_map(src).items()):
        header = read_header(src / file)
        names = stored_names if stored_names is not None else list(header.entries)
        chosen = [n for n in names if _is_target(header.entries[n], targets)]
        weight_map.update({n: file for n in names if n not in chosen})
        if chosen:
            out = f"int8-{file}"
            _write_shard(src / file, dst / out, [header.entries[n] for n in chosen], report, tick)
            weight_map.update({n: out for name in chosen for n in (name, name + "_scale")})
            log(f"  {file}: {len(chosen)} matrices -> {out}")
        _place(src / file, dst / file, copy)
    total = sum((dst / f).stat().st_size for f in set(weight_map.values()))
    superseded = sorted(n for n, f in weight_map.items() if f.startswith("int8-") and not n.endswith("_scale"))
    report.passed_through = sum(1 for f in weight_map.values() if not f.startswith("int8-"))
    index = {"metadata": {"total_size": total, "superseded": superseded}, "weight_map": dict(sorted(weight_map.items()))}
    _copy_other_files(src, dst)
    atomic_write_text(dst / INDEX_FILE, json.dumps(index, indent=2))
    _write_config(src, dst, config)     # last: a cut run leaves no config, so nothing loads half-written
    return report


def trunk_source_bytes(src: str | Path) -> int:
    """Bytes of the matrices `quantize_trunk` quantises (what `tick` counts up to)."""
    src = Path(src)
    targets = _targets(load_config(src))
    return sum(e.nbytes for f in shard_map(src) for e in read_header(src / f).entries.values() if _is_target(e, targets))


def _targets(config) -> set[str]:
    return {s.name for s in expected_tensors(config) if int8_target(s)}


def _is_target(entry, targets: set[str]) -> bool:
    return text_name(entry.name) in targets and entry.dtype in FLOAT_DTYPES and len(entry.shape) == 2


def _write_shard(src: Path, dst: Path, entries: list, report: QuantizeReport, tick) -> None:
    specs = []
    for e in entries:
        specs += [(e.name, "I8", tuple(e.shape)), (e.name + "_scale", "BF16", scale_shape(*e.shape))]
    with StreamingShardWriter(dst, specs, metadata={"format": "pt"}) as writer, safe_open(str(src), framework="pt") as f:
        for e in entries:
            w = f.get_tensor(e.name)
            try:
                q, scale = quantize(w)
            except Int8FormatError as err:
                raise CheckpointError(str(err), file=src.name, tensor=e.name) from None
            writer.write(e.name, q)
            writer.write(e.name + "_scale", scale)
            report.errors.append(TensorError.measure(e.name, w, dequantize(q, scale, torch.float64)))
            report.quantized += 1
            report.bytes_in += e.nbytes
            tick(e.nbytes)
    report.shards += 1
    report.bytes_out += writer.nbytes


def _place(src: Path, dst: Path, copy: bool) -> None:
    """IN's shard, unchanged, in OUT: a hard link (no bytes), or a copy."""
    if copy:
        shutil.copyfile(src, dst)
        return
    try:
        os.link(src, dst)
    except OSError as e:
        if e.errno in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP):
            raise ValueError(f"cannot hard-link {src.name} into {dst.parent} ({os.strerror(e.errno)}): put OUT on the "
                             "same filesystem as IN, or pass --copy to copy IN's shards (their full size)") from None
        raise


def _write_config(src: Path, dst: Path, config) -> None:
    raw = json.loads((src / "config.json").read_text())
    text = raw["text_config"] if raw.get("model_type") == "kimi_k3" else raw
    text["quantization_config"] = quantization_config(replace(config, trunk_format="int8"))
    if text is not raw:
        raw.pop("quantization_config", None)
    atomic_write_text(dst / "config.json", json.dumps(raw, indent=2))
    if load_config(dst).trunk_format != "int8":
        raise AssertionError("the written config does not read back as an int8 trunk")


def _copy_other_files(src: Path, dst: Path) -> None:
    for p in sorted(src.iterdir()):
        if (p.is_file() and not p.is_symlink() and not p.name.endswith(".safetensors")
                and p.name not in (INDEX_FILE, "config.json") and not p.name.startswith(".")):
            shutil.copyfile(p, dst / p.name)
