"""Read a safetensors checkpoint as Moonshot publishes it: sharded with `model.safetensors.index.json`
or a single file, tensor names under `language_model.`, vision tensors alongside.

Tensors are read one at a time through safetensors' memory map, so a loader holds at most one
extra tensor beyond what it keeps. Every failure is a `CheckpointError` naming file and tensor.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open

from k3.checkpoint.errors import CheckpointError
from k3.checkpoint.header import ShardHeader, TensorEntry, read_header
from k3.checkpoint.paths import check_member_name, member_path
from k3.checkpoint.vision_layout import VISION_PREFIXES

# Safetensors floating-point dtype names -> torch dtypes (what a float tensor is kept as, stored).
TORCH_FLOATS = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32, "F64": torch.float64}
# ... and every dtype a trunk tensor may be stored in (an int8 trunk's codes too).
TRUNK_DTYPES = TORCH_FLOATS | {"I8": torch.int8}

INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"
TEXT_PREFIX = "language_model."
IGNORED_PREFIXES = ("vision_tower.", "vision_model.", "mm_projector.", "multi_modal_projector.")


def text_name(stored: str) -> str | None:
    """Map a stored tensor name to the text-model name, or None for vision/projector tensors."""
    name = stored[len(TEXT_PREFIX):] if stored.startswith(TEXT_PREFIX) else stored
    return None if name.startswith(IGNORED_PREFIXES) else name


class CheckpointReader:
    def __init__(self, path: str | Path):
        self.root = Path(path)
        if self.root.is_file():
            raise CheckpointError(f"{self.root} is a file; pass the checkpoint directory that holds it "
                                  f"({self.root.parent})")
        if not self.root.is_dir():
            raise CheckpointError(f"checkpoint directory {self.root} does not exist")
        self._handles: dict[str, object] = {}
        self._where: dict[str, tuple[str, str]] = {}
        self._headers: dict[str, ShardHeader] = {}
        self._fds: dict[str, int] = {}
        self._vision: dict[str, tuple[str, str]] = {}     # the tower's and projector's, by stored name
        for file, stored_names in shard_map(self.root).items():
            handle = self._open(file)
            present = set(handle.keys())
            for stored in stored_names if stored_names is not None else sorted(present):
                if stored not in present:
                    raise CheckpointError(
                        f"the index places this tensor in {file}, but that shard does not contain it; "
                        "the index and the shards are from different revisions - re-download both",
                        file=file, tensor=stored)
                name = text_name(stored)
                if name is not None:
                    self._where[name] = (file, stored)
                elif stored.startswith(VISION_PREFIXES):
                    self._vision[stored] = (file, stored)

    def _open(self, file: str):
        path = member_path(self.root, file, source=INDEX_FILE)
        if not path.is_file():
            raise CheckpointError(f"the index names {file}, which is missing; download it (or re-run the download)",
                                  file=file)
        if file not in self._headers:
            # Bounded, validated header parse before safetensors maps anything.
            self._headers[file] = read_header(path, name=file)
        try:
            handle = safe_open(str(path), framework="pt", device="cpu")
        except (SafetensorError, OSError, ValueError) as e:
            raise CheckpointError(f"corrupt or truncated safetensors file ({e}); re-download it", file=file) from None
        self._handles[file] = handle
        return handle

    def names(self) -> list[str]:
        return list(self._where)

    def vision_names(self) -> list[str]:
        """Stored names of the vision tower's and projector's tensors (vision spec §2)."""
        return list(self._vision)

    def get_vision(self, stored: str) -> torch.Tensor:
        if stored not in self._vision:
            raise CheckpointError("missing tensor: the checkpoint's vision tower is incomplete", tensor=stored)
        file, _ = self._vision[stored]
        try:
            return self._handle(file).get_tensor(stored)
        except (SafetensorError, OSError, RuntimeError, ValueError) as e:
            raise CheckpointError(f"cannot read tensor data ({e}); the shard may be truncated", file=file,
                                  tensor=stored) from None

    def __contains__(self, name: str) -> bool:
        return name in self._where

    def locate(self, name: str) -> tuple[str, str]:
        if name not in self._where:
            raise CheckpointError("missing tensor", tensor=TEXT_PREFIX + name)
        return self._where[name]

    def release(self, file: str) -> None:
        """Drop the memory map and file descriptor of a shard whose tensors have all been read
        (reopened on demand). Tensors still viewing the map keep it alive."""
        self._handles.pop(file, None)
        fd = self._fds.pop(file, None)
        if fd is not None:
            os.close(fd)

    def _handle(self, file: str):
        return self._handles.get(file) or self._open(file)

    def info(self, name: str) -> tuple[tuple[int, ...], str]:
        """(shape, safetensors dtype string) without reading data."""
        file, stored = self.locate(name)
        sl = self._handle(file).get_slice(stored)
        return tuple(sl.get_shape()), sl.get_dtype()

    def entry(self, name: str) -> tuple[str, TensorEntry]:
        """(file, header entry: dtype, shape, absolute byte range) from the shard header alone."""
        file, stored = self.locate(name)
        if file not in self._headers:
            self._headers[file] = read_header(member_path(self.root, file, source=INDEX_FILE), name=file)
        return file, self._headers[file].entries[stored]

    def data_range(self, name: str) -> tuple[str, int, int]:
        """(file, absolute byte offset, byte length) of a tensor's data inside its shard."""
        file, entry = self.entry(name)
        return file, entry.start, entry.nbytes

    def read_into(self, name: str, out: torch.Tensor, start: int | None = None) -> None:
        """Copy a tensor's bytes straight into `out` (contiguous, CPU, same byte size) with positioned
        reads, without mapping the shard: the loader's bulk path for packed experts. With `start`,
        out.nbytes bytes from that byte offset within the tensor instead (a block of its rows)."""
        file, offset, length = self.data_range(name)
        view = memoryview(out.view(torch.uint8).numpy()).cast("B")
        if start is not None:
            if not 0 <= start <= start + view.nbytes <= length:
                raise CheckpointError(f"bytes {start}..{start + view.nbytes} lie outside the tensor's {length}",
                                      file=file, tensor=name)
            offset, length = offset + start, view.nbytes
        if view.nbytes != length:
            raise CheckpointError(f"tensor holds {length} bytes, expected {view.nbytes}", file=file, tensor=name)
        fd = self._fds.get(file)
        if fd is None:
            fd = self._fds[file] = os.open(self.root / file, os.O_RDONLY)
        done = 0
        while done < length:
            n = os.preadv(fd, [view[done:]], offset + done)
            if n <= 0:
                raise CheckpointError("shard ends before the tensor's data; re-download it", file=file, tensor=name)
            done += n

    def get(self, name: str) -> torch.Tensor:
        file, stored = self.locate(name)
        try:
            return self._handle(file).get_tensor(stored)
        except (SafetensorError, OSError, RuntimeError, ValueError) as e:
            raise CheckpointError(f"cannot read tensor data ({e}); the shard may be truncated", file=file,
                                  tensor=stored) from None


def read_index(root: Path) -> dict | None:
    """The parsed index (its `weight_map` checked to be an object), or None when there is none."""
    index = root / INDEX_FILE
    if not index.is_file():
        return None
    try:
        parsed = json.loads(index.read_text())
        weight_map = parsed["weight_map"]
    except (json.JSONDecodeError, KeyError, TypeError, RecursionError) as e:
        raise CheckpointError(f"unreadable index ({type(e).__name__}); re-download it", file=INDEX_FILE) from None
    if not isinstance(weight_map, dict):
        raise CheckpointError("index 'weight_map' is not an object; re-download it", file=INDEX_FILE)
    return parsed


def superseded_names(index: dict | None) -> set[str]:
    """Stored names a parsed index's metadata lists as "superseded": tensors that shards hard-linked from
    the source checkpoint still hold but that this checkpoint replaces (`k3 quantize --trunk int8`), so a
    shard holding a tensor its index does not list there is expected for them alone."""
    metadata = (index or {}).get("metadata")
    names = metadata.get("superseded") if isinstance(metadata, dict) else None
    return {n for n in names if isinstance(n, str)} if isinstance(names, list) else set()


def shard_map(root: Path, index: dict | None = None) -> dict[str, list[str] | None]:
    """file -> stored tensor names it should hold (None: whatever the file has). `index`: the parsed
    index when the caller has read it already (read_index)."""
    index = index if index is not None else read_index(root)
    if index is not None:
        files: dict[str, list[str]] = {}
        for stored, file in index["weight_map"].items():
            files.setdefault(file, []).append(stored)
        for file in files:           # each file once (a header of 300,000 tensors names a few files)
            check_member_name(file, source=INDEX_FILE)
        return files
    if (root / SINGLE_FILE).is_file():
        return {SINGLE_FILE: None}
    shards = sorted(p.name for p in root.glob("*.safetensors"))
    if not shards:
        raise CheckpointError(f"no *.safetensors files and no {INDEX_FILE} in {root}")
    return {f: None for f in shards}
