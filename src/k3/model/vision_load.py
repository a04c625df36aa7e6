"""Load the vision tower and projector from the checkpoint as it is (vision spec §2): 168 BF16
tensors under `vision_tower.` and `mm_projector.`, kept resident (about 0.9 GB at K3's size) whatever the
memory plan streams, since every image runs all of them."""

from __future__ import annotations

import torch

from k3.checkpoint.errors import CheckpointError
from k3.checkpoint.layout import FLOAT_DTYPES
from k3.checkpoint.reader import CheckpointReader
from k3.checkpoint.vision_layout import vision_tensors
from k3.layers.basic import set_tensor

NO_VISION = "load the text model alone with vision=False (k3 ... --no-vision)"


def load_vision(model, reader: CheckpointReader, storage: torch.dtype | None, device: torch.device) -> None:
    specs = vision_tensors(model.vision)
    present = set(reader.vision_names())
    missing = [s.name for s in specs if s.name not in present]
    if missing:
        raise CheckpointError(f"config.json has a vision_config but {len(missing)} of the tower's {len(specs)} "
                              f"tensors are missing (e.g. {missing[0]}); re-download the vision shards or {NO_VISION}",
                              tensor=missing[0])
    for spec in specs:
        t = reader.get_vision(spec.name)
        if tuple(t.shape) != spec.shape or str(t.dtype).removeprefix("torch.") not in _TORCH_NAMES:
            raise CheckpointError(f"shape {list(t.shape)} {t.dtype} where config.json implies {list(spec.shape)} "
                                  f"(a float); the checkpoint does not match its config, or {NO_VISION}", tensor=spec.name)
        module_name, _, leaf = spec.name.rpartition(".")
        set_tensor(model.get_submodule(module_name), leaf, t.to(device=device, dtype=storage or t.dtype).clone())


_TORCH_NAMES = {"bfloat16", "float16", "float32", "float64"}
assert len(_TORCH_NAMES) == len(FLOAT_DTYPES)
