"""Swap a model's packed expert banks for streamed ones when the memory plan says experts do not fit,
and bind streamed layers' large matrices to the trunk store when the trunk does not fit either."""

from __future__ import annotations

from pathlib import Path

import torch

from k3.checkpoint.reader import CheckpointReader
from k3.config import K3Config
from k3.config.units import parse_size
from k3.streaming import MemoryPlan, plan_memory
from k3.streaming.extents import expert_extents
from k3.streaming.store import ExpertStore
from k3.streaming.trunk import trunk_extents
from k3.streaming.trunk_store import TrunkStore
from k3.layers.basic import set_tensor
from k3.layers.streamed import StreamedExperts


def memory_plan(config: K3Config, memory_budget: int | str, storage: torch.dtype | None, device: torch.device,
                state_bytes: int = 0, int8_at_load: bool = False) -> MemoryPlan:
    itemsize = None if storage is None else torch.empty((), dtype=storage).element_size()
    plan = plan_memory(config, parse_size(memory_budget, "memory_budget"), storage_itemsize=itemsize,
                       state_bytes=state_bytes, int8_at_load=int8_at_load)
    if plan.streams_experts:
        if config.expert_format != "mxfp4":
            raise ValueError("streaming experts needs MXFP4 experts (the released format); convert with "
                             "`k3 quantize IN OUT --experts mxfp4`, or raise memory_budget to hold every expert")
        if device.type != "cpu":
            raise ValueError("expert streaming runs on the CPU for now; use device='cpu' or a larger memory_budget")
    return plan


def attach_streamed_experts(model, config: K3Config, path: str | Path, reader: CheckpointReader, plan: MemoryPlan,
                            io_threads: int = 4, direct_io: bool = True) -> ExpertStore:
    """Replace every MoE layer's expert bank by a StreamedExperts reading the original shards."""
    store = ExpertStore(path, expert_extents(reader, config), plan.expert_slots, io_threads=io_threads,
                        direct_io=direct_io)
    act = (config.hidden_act, config.situ_beta, config.situ_linear_beta)
    for i in config.moe_layers:
        moe = model.get_submodule(f"model.layers.{i}.block_sparse_moe")
        moe.experts = StreamedExperts(store, i, config.mxfp4_group_size, *act)
    model.weights_changed()
    return store


def attach_streamed_trunk(model, config: K3Config, path: str | Path, reader: CheckpointReader, plan: MemoryPlan,
                          io_threads: int = 4, direct_io: bool = True) -> TrunkStore:
    """Bind every streamed layer's large matrices to their places in a TrunkStore's arenas and give the
    layer the store, so its bytes are read before it runs. Those layers' projections run unfused: a fused matrix
    would need its members' bytes side by side, which their places in the shards rarely allow (the
    result is the same bit for bit: layers/fused.py)."""
    # Twice the experts' readers: a layer is one long run of large reads, and a deeper queue read it
    # faster (benchmarks/streaming.py).
    store = TrunkStore(path, trunk_extents(reader, config, plan.streamed_layers), io_threads=2 * io_threads,
                       direct_io=direct_io)
    for i in plan.streamed_layers:
        layer = model.get_submodule(f"model.layers.{i}")
        for module in layer.modules():
            if "fused" in module.__dict__:
                module.fused = {}
        for name, tensor in store.tensors[i].items():
            module_name, _, leaf = name.rpartition(".")
            set_tensor(model.get_submodule(module_name), leaf, tensor)
        layer.store = store
    model.weights_changed()
    return store
