"""What a training run is told (`k3 train`'s flags are these fields); no torch here, so `k3 --help` stays fast."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class TrainConfig:
    data: str
    out: str
    steps: int = 200
    batch_size: int = 16          # sequences per optimizer step (global, all ranks, all micro-batches)
    grad_accum: int = 1
    seq_len: int = 128
    lr: float = 3e-3
    min_lr: float = 3e-4
    warmup: int = 20
    weight_decay: float = 0.1
    clip: float = 1.0
    bias_rate: float = 1e-3       # router correction-bias step (auxiliary-loss-free balancing)
    qat_steps: int = 0            # last N steps see MXFP4-rounded experts (straight-through)
    eval_every: int = 50
    eval_batches: int = 8
    save_every: int = 100
    log_every: int = 10
    seed: int = 0
    dtype: str = "float32"        # or bfloat16 (autocast)
    device: str = "auto"          # auto = cuda when present, else cpu
    resume: bool = True
