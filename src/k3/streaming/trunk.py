"""Which trunk tensors a layer streams when the trunk does not fit, and where they live in the shards.

A streamed layer's large matrices (attention and MLA projections, the shared expert, the latent MoE
projections: every 2-D floating-point weight of more than one row; an int8 trunk's codes and scales) are read from the original shards
before the layer runs. Everything else stays resident: norms, fp32 parameters (gates, convolutions),
AttnRes projections (one row), the router, the embedding (read by row) and lm_head, which every token
reads too but belongs to no layer. Every trunk byte is read once per token, so a resident trunk byte
saves one disk byte a token, more than any cached expert byte does (an expert is read by about
top-k / experts of the tokens); the planner therefore keeps trunk layers first and experts last.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from k3.checkpoint.errors import CheckpointError
from k3.checkpoint.layout import FLOAT_DTYPES, ExpectedTensor, expected_tensors
from k3.checkpoint.reader import TEXT_PREFIX, CheckpointReader
from k3.config import K3Config

LAYER = re.compile(r"model\.layers\.(\d+)\.")
ROUTER = ".block_sparse_moe.gate.weight"
PAGE = 4096
ARENAS = 2  # layer-sized buffers streamed layers take turns in: one computes while the next is read


def streamable(spec: ExpectedTensor) -> int | None:
    """The layer whose streamed set holds `spec`, or None when it always stays resident."""
    m = LAYER.match(spec.name)
    if (m is None or spec.expert is not None or len(spec.shape) != 2 or spec.shape[0] < 2
            or spec.dtype not in ("BF16", "F16", "I8") or spec.name.endswith(ROUTER)):
        return None
    return int(m.group(1))


def layer_stream_specs(c: K3Config) -> dict[int, list[ExpectedTensor]]:
    """layer -> the tensors it streams, for every layer (in layer order); a fresh copy each call."""
    return {i: list(specs) for i, specs in _layer_stream_specs(c).items()}


@functools.lru_cache(maxsize=8)   # a plan asks several times; listing K3's tensors takes seconds
def _layer_stream_specs(c: K3Config) -> dict[int, tuple[ExpectedTensor, ...]]:
    out: dict[int, list[ExpectedTensor]] = {i: [] for i in range(c.num_hidden_layers)}
    for spec in expected_tensors(c):
        layer = streamable(spec)
        if layer is not None:
            out[layer].append(spec)
    return {i: tuple(specs) for i, specs in out.items()}


def region_bytes(nbytes: int) -> int:
    """Arena bytes one tensor may take: its bytes, shifted by up to a page to match the file's alignment
    (so O_DIRECT reads land in place), rounded up to whole pages."""
    return -(-(nbytes + PAGE) // PAGE) * PAGE


@dataclass(frozen=True)
class TrunkPart:
    name: str          # model-relative tensor name
    file: str
    offset: int        # absolute byte offset in the shard
    nbytes: int
    shape: tuple[int, ...]
    dtype: str         # as stored (kept so: a streamed trunk keeps the stored dtype)


def trunk_extents(reader: CheckpointReader, c: K3Config, layers: tuple[int, ...]) -> dict[int, list[TrunkPart]]:
    """layer -> its streamed tensors' places in the shards (sorted by file and offset), header-checked."""
    specs = layer_stream_specs(c)
    out = {}
    for layer in layers:
        parts = []
        for spec in specs[layer]:
            file, entry = reader.entry(spec.name)
            if tuple(entry.shape) != spec.shape or entry.dtype not in (("I8",) if spec.dtype == "I8" else FLOAT_DTYPES):
                raise CheckpointError(f"{entry.dtype}{list(entry.shape)} where {spec.dtype}{list(spec.shape)} is "
                                      "expected", file=file, tensor=TEXT_PREFIX + spec.name)
            parts.append(TrunkPart(spec.name, file, entry.start, entry.nbytes, spec.shape, entry.dtype))
        out[layer] = sorted(parts, key=lambda p: (p.file, p.offset))
    return out
