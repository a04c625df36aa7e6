"""Write tensors as the official sharded layout: `model-0000i-of-00000N.safetensors` + index.

Shard names follow K3's convention (5-digit index, 6-digit total). Each file is written to a
temporary name and renamed into place, so an interrupted write never leaves a file that looks finished.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable
from pathlib import Path

import torch
from safetensors.torch import save_file

from k3.checkpoint.reader import INDEX_FILE

TensorMaker = Callable[[], torch.Tensor]
EXPERT_PREFIX = re.compile(r"(.*\.experts\.\d+)\.")


def shard_name(i: int, n: int) -> str:
    return f"model-{i + 1:05d}-of-{n:06d}.safetensors"


def atomic_write_text(path: Path, text: str) -> None:
    """`text` into `path` whole or not at all: a temporary file beside it (UTF-8), then a rename."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def plan_shards(groups: list[list[tuple[str, int]]], num_shards: int) -> list[list[str]]:
    """Split ordered groups of (name, nbytes) into at most `num_shards` shards of similar size.
    A group (e.g. the six tensors of one expert) never straddles two shards."""
    total = sum(b for g in groups for _, b in g)
    target = max(1, total // max(1, num_shards))
    shards: list[list[str]] = [[]]
    filled = 0
    for group in groups:
        size = sum(b for _, b in group)
        if filled >= target and len(shards) < num_shards:
            shards.append([])
            filled = 0
        shards[-1].extend(name for name, _ in group)
        filled += size
    return [s for s in shards if s]


def write_sharded(out_dir: str | Path, groups: list[list[tuple[str, int]]], make: dict[str, TensorMaker],
                  num_shards: int = 2) -> list[Path]:
    """Materialise one shard at a time (`make[name]()`), save it, then write the index."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    plan = plan_shards(groups, num_shards)
    weight_map: dict[str, str] = {}
    total = 0
    files = []
    for i, names in enumerate(plan):
        fname = shard_name(i, len(plan))
        tensors = {name: make[name]().contiguous() for name in names}
        total += sum(t.numel() * t.element_size() for t in tensors.values())
        tmp = out / (fname + ".tmp")
        save_file(tensors, str(tmp), metadata={"format": "pt"})
        os.chmod(tmp, 0o644)
        os.replace(tmp, out / fname)
        weight_map.update({name: fname for name in names})
        files.append(out / fname)
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    atomic_write_text(out / INDEX_FILE, json.dumps(index, indent=2))
    return files


def groups_of(names_and_bytes: Iterable[tuple[str, int]]) -> list[list[tuple[str, int]]]:
    """Group consecutive tensors of the same expert (`...experts.{e}.`) together; others stand alone."""
    groups: list[list[tuple[str, int]]] = []
    last_key = None
    for name, nbytes in names_and_bytes:
        m = EXPERT_PREFIX.match(name)
        key = m.group(1) if m else None
        if key is not None and key == last_key:
            groups[-1].append((name, nbytes))
        else:
            groups.append([(name, nbytes)])
        last_key = key
    return groups
