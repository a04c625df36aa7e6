"""Where each routed expert's six tensors (w1/w3/w2 packed + scale) live in the original shards.

Read from the safetensors headers only. In the released checkpoint an expert's six tensors are
contiguous in one shard (spec §2.1), so one positioned read fetches the whole expert; the
extent records that, and falls back to one read per tensor when it is not so.
"""

from __future__ import annotations

from dataclasses import dataclass

from k3.checkpoint.errors import CheckpointError
from k3.checkpoint.layout import EXPERT_MATS, expert_tensors
from k3.checkpoint.reader import TEXT_PREFIX, CheckpointReader
from k3.config import K3Config

KINDS = ("weight_packed", "weight_scale")


@dataclass(frozen=True)
class Part:
    role: str  # "w1_packed", "w1_scale", ...
    file: str
    offset: int
    nbytes: int
    shape: tuple[int, ...]


@dataclass(frozen=True)
class ExpertExtent:
    parts: tuple[Part, ...]  # sorted by (file, offset)

    @property
    def nbytes(self) -> int:
        return sum(p.nbytes for p in self.parts)

    @property
    def contiguous(self) -> bool:
        """All parts back to back in one file: one read covers the expert."""
        first = self.parts[0]
        pos = first.offset
        for p in self.parts:
            if p.file != first.file or p.offset != pos:
                return False
            pos += p.nbytes
        return True

    @property
    def sort_key(self) -> tuple[str, int]:
        return self.parts[0].file, self.parts[0].offset


def expert_extents(reader: CheckpointReader, c: K3Config) -> dict[tuple[int, int], ExpertExtent]:
    """(layer, expert) -> extent, for every MoE layer; shapes checked against the layout."""
    out = {}
    for layer in c.moe_layers:
        prefix = f"model.layers.{layer}.block_sparse_moe."
        for e in range(c.num_experts):
            parts = []
            for spec in expert_tensors(c, prefix, e):
                file, entry = reader.entry(spec.name)
                if entry.shape != spec.shape or entry.dtype != "U8":
                    raise CheckpointError(f"{entry.dtype}{list(entry.shape)} where packed MXFP4 "
                                          f"U8{list(spec.shape)} is expected", file=file, tensor=TEXT_PREFIX + spec.name)
                mat, kind = spec.name.rsplit(".", 2)[-2:]
                parts.append(Part(f"{mat}_{kind.removeprefix('weight_')}", file, entry.start, entry.nbytes, spec.shape))
            out[layer, e] = ExpertExtent(tuple(sorted(parts, key=lambda p: (p.file, p.offset))))
    return out


def roles() -> list[str]:
    return [f"{m}_{k.removeprefix('weight_')}" for m in EXPERT_MATS for k in KINDS]
