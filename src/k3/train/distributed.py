"""Data parallelism through torch.distributed, as launched by `torchrun` (gloo on CPU, NCCL on GPUs).

Gradients are averaged explicitly after backward (a rank whose tokens never reached an expert
contributes zeros), so every rank applies the same update; expert loads are summed for the
router-bias balancer.
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist


def setup(device: torch.device) -> tuple[int, int]:
    """-> (rank, world size); (0, 1) when not launched by torchrun."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return 0, 1
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return dist.get_rank(), world


def average_gradients(params: list[torch.nn.Parameter], world: int) -> None:
    if world == 1:
        return
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        dist.all_reduce(p.grad)
        p.grad /= world


def sum_across(t: torch.Tensor, world: int) -> torch.Tensor:
    if world > 1:
        dist.all_reduce(t)
    return t


def teardown() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()
