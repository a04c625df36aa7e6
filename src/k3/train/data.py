"""Token data for training: `train.bin` / `val.bin` (uint16 or uint32 token ids) + `meta.json`.

Batches are windows at positions drawn from a generator seeded by (seed, step, micro-batch), so a
resumed run sees exactly the data an uninterrupted one would, and each data-parallel rank takes
its slice of the same global batch.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch


class DataError(ValueError):
    pass


@dataclass
class TokenData:
    train: np.ndarray
    val: np.ndarray
    vocab_size: int
    meta: dict

    @classmethod
    def load(cls, path: str | Path) -> "TokenData":
        d = Path(path)
        try:
            meta = json.loads((d / "meta.json").read_text())
        except FileNotFoundError:
            raise DataError(f"no meta.json in {d}: prepare data with `k3 prepare-data`") from None
        dtype = np.dtype(meta["dtype"])
        arrays = []
        for split in ("train", "val"):
            f = d / f"{split}.bin"
            if not f.is_file():
                raise DataError(f"missing {f}: prepare data with `k3 prepare-data`")
            arrays.append(np.memmap(f, dtype=dtype, mode="r"))
        return cls(arrays[0], arrays[1], int(meta["vocab_size"]), meta)

    def batch(self, split: str, seed: int, step: int, micro: int, size: int, seq_len: int,
              rows: slice | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """-> (inputs [b, seq_len], targets [b, seq_len]) int64, rows `rows` of the global micro-batch."""
        data = self.train if split == "train" else self.val
        if len(data) <= seq_len + 1:
            raise DataError(f"{split} split has {len(data)} tokens, fewer than seq_len + 1 = {seq_len + 1}")
        rng = np.random.default_rng([seed, step, micro, 0 if split == "train" else 1])
        starts = rng.integers(0, len(data) - seq_len - 1, size=size)[rows or slice(None)]
        windows = np.stack([np.asarray(data[s:s + seq_len + 1], dtype=np.int64) for s in starts])
        t = torch.from_numpy(windows)
        return t[:, :-1], t[:, 1:]
