"""Write one safetensors file tensor by tensor, never holding more than one tensor in memory.

The header is built up front from every tensor's (name, dtype, shape), then the data is appended
in header order. The file is written under a temporary name and renamed into place on `close()`,
so a killed writer never leaves a file that looks finished. As a context manager it closes when the
block ends and aborts (removing the temporary file) when the block, or the close, raises. Readable by `safetensors.safe_open`.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import torch

from k3.checkpoint.header import DTYPE_SIZES

TORCH_TO_ST = {torch.bfloat16: "BF16", torch.float16: "F16", torch.float32: "F32", torch.float64: "F64",
               torch.uint8: "U8", torch.int8: "I8", torch.int32: "I32", torch.int64: "I64", torch.bool: "BOOL"}


class StreamingShardWriter:
    def __init__(self, path: str | Path, specs: list[tuple[str, str, tuple[int, ...]]],
                 metadata: dict[str, str] | None = None):
        """specs: (name, safetensors dtype, shape) in the order tensors will be written."""
        self.path = Path(path)
        self.tmp = self.path.with_name(self.path.name + ".tmp")
        self._order = [name for name, _, _ in specs]
        self._specs = {name: (dtype, tuple(shape)) for name, dtype, shape in specs}
        header, pos = {}, 0
        for name, dtype, shape in specs:
            n = math.prod(shape) * DTYPE_SIZES[dtype]
            header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [pos, pos + n]}
            pos += n
        if metadata:
            header = {"__metadata__": metadata} | header
        raw = json.dumps(header, separators=(",", ":")).encode()
        raw += b" " * (-len(raw) % 8)
        self.nbytes = 8 + len(raw) + pos
        self._file = open(self.tmp, "wb")
        self._file.write(len(raw).to_bytes(8, "little") + raw)
        self._next = 0

    def write(self, name: str, tensor: torch.Tensor) -> None:
        self.write_bytes(name, _tensor_bytes(name, tensor, *self._specs[name]))

    def write_bytes(self, name: str, data: bytes | memoryview) -> None:
        """Raw little-endian bytes of the next tensor (a byte-identical pass-through)."""
        if self._next >= len(self._order) or self._order[self._next] != name:
            raise ValueError(f"tensors must be written in header order; got {name!r} at position {self._next}")
        dtype, shape = self._specs[name]
        if len(data) != math.prod(shape) * DTYPE_SIZES[dtype]:
            raise ValueError(f"{name}: {len(data)} bytes for {dtype}{list(shape)}")
        self._file.write(data)
        self._next += 1

    def close(self) -> Path:
        if self._next != len(self._order):
            raise ValueError(f"{len(self._order) - self._next} tensor(s) not written; first {self._order[self._next]!r}")
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        os.chmod(self.tmp, 0o644)
        os.replace(self.tmp, self.path)
        return self.path

    def abort(self) -> None:
        self._file.close()
        self.tmp.unlink(missing_ok=True)

    def __enter__(self) -> "StreamingShardWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.abort()
            return
        try:
            self.close()
        except BaseException:
            self.abort()
            raise


def _tensor_bytes(name: str, t: torch.Tensor, dtype: str, shape: tuple[int, ...]) -> memoryview:
    if TORCH_TO_ST.get(t.dtype) != dtype or tuple(t.shape) != shape:
        raise ValueError(f"{name}: got {t.dtype}{list(t.shape)}, header says {dtype}{list(shape)}")
    flat = t.detach().to("cpu").contiguous().reshape(-1).view(torch.uint8)
    return memoryview(flat.numpy()).cast("B")


def write_sharded_streaming(out_dir: str | Path, entries: list[tuple[str, str, tuple[int, ...]]], make,
                            num_shards: int = 2) -> list[Path]:
    """The official sharded layout (`model-0000i-of-00000N.safetensors` + index), written tensor by
    tensor: `make(name)` is called once per tensor, right before its bytes are written, so at most
    one tensor is in memory. Entries of one expert (`...experts.{e}.`) stay in one shard."""
    from k3.checkpoint.reader import INDEX_FILE
    from k3.checkpoint.writer import atomic_write_text, groups_of, plan_shards, shard_name

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    spec = {name: (dtype, tuple(shape)) for name, dtype, shape in entries}
    sizes = [(name, math.prod(shape) * DTYPE_SIZES[dtype]) for name, dtype, shape in entries]
    size_of = dict(sizes)
    plan = plan_shards(groups_of(sizes), num_shards)
    weight_map, total, files = {}, 0, []
    for i, names in enumerate(plan):
        fname = shard_name(i, len(plan))
        with StreamingShardWriter(out / fname, [(n, *spec[n]) for n in names], metadata={"format": "pt"}) as writer:
            for name in names:
                writer.write(name, make(name))
        files.append(writer.path)
        total += sum(size_of[n] for n in names)
        weight_map.update({name: fname for name in names})
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    atomic_write_text(out / INDEX_FILE, json.dumps(index, indent=2))
    return files
