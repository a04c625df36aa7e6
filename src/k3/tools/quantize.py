"""`k3 quantize IN OUT --experts mxfp4`: BF16/FP32 routed experts -> compressed-tensors `mxfp4-pack-quantized`.

Streams shard by shard and tensor by tensor (one source tensor and its codes in memory at a time).
Each output shard mirrors an input shard; `experts.{e}.w{1,2,3}.weight` becomes the
`weight_packed`/`weight_scale` pair of the official layout, every other tensor (already-packed
experts included) is copied byte for byte. config.json gains the release's `quantization_config`;
tokenizer and other files are copied. Per-tensor error (relative L2, max abs) is reported.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from safetensors import safe_open

from k3.checkpoint.errors import CheckpointError
from k3.checkpoint.header import TensorEntry, read_header
from k3.checkpoint.layout import FLOAT_DTYPES
from k3.checkpoint.reader import INDEX_FILE, SINGLE_FILE, shard_map
from k3.checkpoint.stream_writer import StreamingShardWriter
from k3.checkpoint.writer import atomic_write_text, shard_name
from k3.config.hf import load_config
from k3.config.quant import mxfp4_quantization_config
from k3.ops.mxfp4 import dequantize, quantize

DENSE_EXPERT = re.compile(r".*\.block_sparse_moe\.experts\.\d+\.w[123]\.weight$")


@dataclass(frozen=True)
class TensorError:
    name: str
    rel_l2: float
    max_abs: float

    @classmethod
    def measure(cls, name: str, w: torch.Tensor, dequantised: torch.Tensor) -> "TensorError":
        """The quantisation error of `w`: relative L2 (as k3.testing.rel_l2 defines it) and max abs, in float64."""
        ref = w.double()
        diff = dequantised.double() - ref
        norm = float(ref.norm())
        return cls(name, float(diff.norm()) / norm if norm > 0 else float(diff.norm()), float(diff.abs().max()))


@dataclass
class QuantizeReport:
    shards: int = 0
    quantized: int = 0
    passed_through: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    errors: list[TensorError] | None = None

    def to_dict(self) -> dict:
        errs = self.errors or []
        worst = max(errs, key=lambda e: e.rel_l2, default=None)
        return {k: v for k, v in asdict(self).items() if k != "errors"} | {
            "max_rel_l2": worst.rel_l2 if worst else 0.0, "worst_tensor": worst.name if worst else None,
            "mean_rel_l2": sum(e.rel_l2 for e in errs) / len(errs) if errs else 0.0}


def quantize_checkpoint(src: str | Path, dst: str | Path, group_size: int = 32, log=print,
                        tick=lambda nbytes: None) -> QuantizeReport:
    """`tick(nbytes)` after each source tensor is written (progress)."""
    src, dst = Path(src), Path(dst)
    load_config(src)  # fail early on a config k3 cannot read
    shards = _source_shards(src)
    if dst.resolve() == src.resolve():
        raise ValueError("OUT must differ from IN: quantize writes a new checkpoint")
    if dst.exists() and any(dst.iterdir()):
        raise ValueError(f"{dst} is not empty; choose a new directory")
    dst.mkdir(parents=True, exist_ok=True)
    report = QuantizeReport(errors=[])
    weight_map: dict[str, str] = {}
    for i, file in enumerate(shards):
        out_name = shard_name(i, len(shards)) if len(shards) > 1 or file != SINGLE_FILE else SINGLE_FILE
        names = _convert_shard(src / file, dst / out_name, group_size, report, tick)
        weight_map.update({n: out_name for n in names})
        log(f"  {file} -> {out_name}: {len(names)} tensors")
    if len(shards) > 1 or shards[0] != SINGLE_FILE:
        index = {"metadata": {"total_size": report.bytes_out}, "weight_map": dict(sorted(weight_map.items()))}
        atomic_write_text(dst / INDEX_FILE, json.dumps(index, indent=2))
    _write_config(src, dst, group_size)
    _copy_other_files(src, dst, shards)
    return report


def source_bytes(src: str | Path) -> int:
    """Tensor bytes in the source shards (what `tick` counts up to)."""
    src = Path(src)
    return sum(e.nbytes for f in _source_shards(src) for e in read_header(src / f).entries.values())


def _source_shards(src: Path) -> list[str]:
    return sorted(shard_map(src))


def is_dense_expert(e: TensorEntry) -> bool:
    """A routed expert matrix stored as floats: the tensors quantize converts."""
    return bool(DENSE_EXPERT.match(e.name)) and e.dtype in FLOAT_DTYPES and len(e.shape) == 2


def _output_specs(header, group_size: int) -> list[tuple[str, str, tuple[int, ...]]]:
    specs = []
    for e in sorted(header.entries.values(), key=lambda e: e.start):
        if is_dense_expert(e):
            out, inp = e.shape
            base = e.name[: -len("weight")]
            specs += [(base + "weight_packed", "U8", (out, inp // 2)), (base + "weight_scale", "U8", (out, inp // group_size))]
        else:
            specs.append((e.name, e.dtype, e.shape))
    return specs


def _convert_shard(src: Path, dst: Path, group_size: int, report: QuantizeReport, tick) -> list[str]:
    header = read_header(src)
    specs = _output_specs(header, group_size)
    with (StreamingShardWriter(dst, specs, metadata={"format": "pt"}) as writer,
          safe_open(str(src), framework="pt") as f, open(src, "rb") as raw):
        for e in sorted(header.entries.values(), key=lambda e: e.start):
            if is_dense_expert(e):
                _quantize_one(e.name, f.get_tensor(e.name), writer, group_size, report)
            else:
                raw.seek(e.start)
                writer.write_bytes(e.name, raw.read(e.nbytes))
                report.passed_through += 1
            tick(e.nbytes)
    report.shards += 1
    report.bytes_in += header.file_size
    report.bytes_out += writer.nbytes
    return [name for name, _, _ in specs]


def _quantize_one(name: str, w: torch.Tensor, writer: StreamingShardWriter, group_size: int,
                  report: QuantizeReport) -> None:
    try:
        packed, scale = quantize(w, group_size)
    except ValueError as err:
        raise CheckpointError(str(err), tensor=name) from None
    report.errors.append(TensorError.measure(name, w, dequantize(packed, scale, group_size, torch.float64)))
    base = name[: -len("weight")]
    writer.write(base + "weight_packed", packed)
    writer.write(base + "weight_scale", scale)
    report.quantized += 1


def _write_config(src: Path, dst: Path, group_size: int) -> None:
    raw = json.loads((src / "config.json").read_text())
    text = raw["text_config"] if raw.get("model_type") == "kimi_k3" else raw
    text["quantization_config"] = mxfp4_quantization_config(group_size)
    if text is not raw:
        raw.pop("quantization_config", None)
    atomic_write_text(dst / "config.json", json.dumps(raw, indent=2))
    load_config(dst)  # the written config must read back as MXFP4


def _copy_other_files(src: Path, dst: Path, shards: list[str]) -> None:
    skip = set(shards) | {INDEX_FILE, "config.json"}
    for p in sorted(src.iterdir()):
        if p.is_file() and not p.is_symlink() and p.name not in skip and not p.name.startswith("."):
            shutil.copyfile(p, dst / p.name)
