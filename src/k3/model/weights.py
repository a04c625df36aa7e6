"""Build a K3ForCausalLM from a checkpoint directory without ever holding two copies of the weights.

The module tree is created on the meta device, then each parameter is replaced by the tensor read
from the checkpoint (checked against the layout the config implies, converted by the dtype rules).
Routed MXFP4 experts are copied, still packed, into one uint8 bank per layer. Module names equal checkpoint
names after the `language_model.` prefix, except the stacked expert banks and A_log (the vision tower: vision_load.py).
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import torch
from torch import nn

from k3.checkpoint.errors import CheckpointError
from k3.checkpoint.layout import FLOAT_DTYPES, ExpectedTensor, expected_tensors
from k3.checkpoint.reader import TEXT_PREFIX, TORCH_FLOATS, TRUNK_DTYPES, CheckpointReader
from k3.config import K3Config, load_config
from k3.layers.basic import set_tensor
from k3.layers.experts import DenseExperts, PackedExperts
from k3.layers.fused import fuse_inputs
from k3.model.int8_load import check_stored_scales, int8_weights, quantise_into, quantised
from k3.model.k3 import K3ForCausalLM
from k3.models import resolve_model
from k3.model.vision_load import load_vision
from k3.model.streaming import attach_streamed_experts, attach_streamed_trunk, memory_plan
from k3.ops import dispatch, huge_pages
from k3.ops.mxfp4 import MXFP4FormatError, check_scales

# Recurrent-gate and small parameters the official code keeps in fp32 whatever the model dtype.
EMBEDDING = "model.embed_tokens.weight"   # read by row, from the shard's map (not onto huge pages)
FP32_SUFFIXES = ("A_log", "dt_bias", "conv1d.weight", "o_norm.weight", "e_score_correction_bias")
EXPERT_NAME = re.compile(r"(.*\.block_sparse_moe)\.experts\.(\d+)\.(w[123])\.(weight_packed|weight_scale|weight)$")


def resolve_dtypes(dtype: torch.dtype | None, device: torch.device) -> tuple[torch.dtype | None, torch.dtype]:
    """(storage dtype for float weights, None = as stored; compute dtype).

    On a CPU without bf16 matmul units, bf16 GEMMs are far slower than fp32, so the default
    keeps the checkpoint's compact bf16 bytes and computes in fp32. On GPUs the default is bf16.
    """
    if dtype is not None:
        if not dtype.is_floating_point:
            raise ValueError(f"dtype must be a floating dtype, got {dtype}")
        return dtype, dtype
    if device.type == "cpu":
        return None, torch.float32
    return torch.bfloat16, torch.bfloat16


def load_model(path: str | Path, dtype: torch.dtype | None = None, device: str | torch.device = "cpu", *,
               memory_budget: int | str | None = None, state_bytes: int = 0, io_threads: int = 4,
               direct_io: bool = True, trunk: str | None = None, vision: bool = True) -> K3ForCausalLM:
    """memory_budget (e.g. "24GB"): weights (+ `state_bytes` of sequence state) stay within it; routed
    experts that do not fit are streamed from the shards, and when the trunk does not fit either, some
    layers' large matrices too (see k3.streaming). `model.memory_plan` says how.
    trunk="int8": the trunk's projection matrices (k3.checkpoint.layout.int8_target) are quantised to
    int8 with per-32 scales as they are read (half the memory and bytes per token; error measured by
    benchmarks/int8_trunk.py). A checkpoint written by `k3 quantize --trunk int8` is int8 already, with or without it.
    vision=False: a checkpoint with a vision tower loads its text model alone (the tower is not read)."""
    if trunk not in (None, "int8"):
        raise ValueError(f"trunk={trunk!r}: expected None (as stored) or 'int8'")
    path = resolve_model(path)
    config = load_config(path)
    device = torch.device(device)
    storage, compute = resolve_dtypes(dtype, device)
    quantise = trunk == "int8" and config.trunk_format is None
    plan = (memory_plan(config if vision else config.replace(vision=None), memory_budget, storage, device,
                        state_bytes, int8_at_load=quantise)
            if memory_budget is not None else None)
    with torch.device("meta"):
        model = K3ForCausalLM(config, compute, vision=vision)
    fuse_inputs(model)
    reader = CheckpointReader(path)
    specs = expected_tensors(config)
    _check_names(reader, specs)
    int8_names = int8_weights(model, specs, quantise, plan.streamed_layers if plan is not None else ())
    model.memory_plan, model.expert_store, model.trunk_store = plan, None, None
    if plan is not None and plan.streams_experts:
        model.expert_store = attach_streamed_experts(model, config, path, reader, plan, io_threads, direct_io)
        specs = [s for s in specs if s.expert is None]
    if plan is not None and plan.streamed_layers:
        model.trunk_store = attach_streamed_trunk(model, config, path, reader, plan, io_threads, direct_io)
        streamed = {name for tensors in model.trunk_store.tensors.values() for name in tensors}
        specs = [s for s in specs if s.name not in streamed]
    banks = _allocate_banks(model, device, storage, reader)
    blocks = _allocate_fused(model, device, storage, reader, int8_names)
    # Shard by shard: a shard's source pages are unmapped before the next is read (peak: weights + one shard).
    by_file: dict[str, list[ExpectedTensor]] = {}
    for spec in specs:
        by_file.setdefault(reader.locate(spec.name)[0], []).append(spec)
    for file, file_specs in by_file.items():
        for spec in file_specs:
            if spec.name in blocks:
                _fill_block(reader, spec, blocks, storage, device, quantise)
            elif quantise and spec.name in int8_names:
                _check_header(reader, spec)
                model.get_submodule(spec.name.rpartition(".")[0]).set_int8(*quantised(reader, spec.name, device))
            else:
                _load_one(model, banks, reader, spec, storage, device)
        reader.release(file)
    if model.vision is not None:
        load_vision(model, reader, storage, device)
    model.eval()
    model.weights_changed()   # every weight is in place: the native steps bind at their first use
    if device.type == "cpu":
        dispatch.prepare()   # the CPU kernels are built or loaded here, not in the first forward (or inside a trace)
    return model


def _load_one(model, banks, reader, spec: ExpectedTensor, storage, device) -> None:
    _check_header(reader, spec)
    match = EXPERT_NAME.match(spec.name)
    if match:
        slot = _expert_slot(banks[match.group(1)], int(match.group(2)), match.group(3), match.group(4))
        _fill_expert(reader, spec, slot)
    else:
        by_row = spec.name == EMBEDDING and not model.config.tie_word_embeddings
        t = None if by_row else _read_onto_huge_pages(reader, spec, storage, device)
        if t is None:
            t = _convert(spec.name, reader.get(spec.name), storage, device, huge=not by_row)
        _assign(model, spec.name, t, model.config)


def _read_onto_huge_pages(reader: CheckpointReader, spec: ExpectedTensor, storage, device) -> torch.Tensor | None:
    """A tensor kept as stored (storage None, no fp32 rule) of at least a huge page, read with positioned
    reads onto huge pages where the system has them (ops/huge_pages.py: every decode token reads it,
    and the shard map's 4 KB pages cost TLB misses), without mapping the shard; else None. Not the
    untied embedding table: a token reads one row of it, from its memory map (the memory plan counts
    it apart)."""
    shape, stored = reader.info(spec.name)
    dtype = TRUNK_DTYPES.get(stored)
    if (storage is not None or device.type != "cpu" or dtype is None or spec.name.endswith(FP32_SUFFIXES)
            or _is_int8_scale(spec.name)):
        return None
    nbytes = torch.Size(shape).numel() * torch.empty((), dtype=dtype).element_size()
    if not huge_pages.worth_it(nbytes):
        return None
    out = huge_pages.empty(shape, dtype)
    reader.read_into(spec.name, out)
    return out


def _check_names(reader: CheckpointReader, specs: list[ExpectedTensor]) -> None:
    expected = {s.name for s in specs}
    missing = sorted(n for n in expected if n not in reader)
    if missing:
        more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        raise CheckpointError(
            f"{len(missing)} tensor(s) the config requires are missing: {', '.join(missing[:5])}{more}; "
            "the checkpoint is incomplete or does not match config.json", tensor=TEXT_PREFIX + missing[0])
    unexpected = sorted(set(reader.names()) - expected)
    if unexpected:
        warnings.warn(f"ignoring {len(unexpected)} tensor(s) the config does not use, e.g. {unexpected[0]}",
                      stacklevel=3)


def _check_header(reader: CheckpointReader, spec: ExpectedTensor) -> None:
    """Shape and dtype from the header, against the layout the config implies."""
    shape, dtype = reader.info(spec.name)
    file, stored = reader.locate(spec.name)
    # A_log comes padded, exact or 4-D; `_narrow_a_log` checks its length against num_heads.
    ok_shape = len(shape) in (1, 4) if spec.name.endswith("A_log") else shape == spec.shape
    if not ok_shape:
        raise CheckpointError(f"shape {list(shape)} does not match {list(spec.shape)} implied by config.json",
                              file=file, tensor=stored)
    if spec.dtype in ("U8", "I8"):
        ok_dtype = dtype == spec.dtype
    else:   # an int8 trunk's scales are bf16 exactly, as its kernels read them
        ok_dtype = dtype == "BF16" if _is_int8_scale(spec.name) else dtype in FLOAT_DTYPES
    if not ok_dtype:
        raise CheckpointError(f"dtype {dtype} where {spec.dtype} is expected", file=file, tensor=stored)


def _is_int8_scale(name: str) -> bool:
    return name.endswith(".weight_scale") and EXPERT_NAME.match(name) is None


def _fill_expert(reader: CheckpointReader, spec: ExpectedTensor, slot: torch.Tensor) -> None:
    """Read one expert matrix into its bank slot: positioned reads for CPU uint8 banks (no mapping
    of the shard), a mapped read and copy otherwise."""
    if slot.device.type == "cpu" and slot.dtype == torch.uint8:
        reader.read_into(spec.name, slot)
    else:
        slot.copy_(reader.get(spec.name))
    if spec.name.endswith("weight_scale"):
        file, stored = reader.locate(spec.name)
        try:
            check_scales(slot, stored)
        except MXFP4FormatError as e:
            raise CheckpointError(str(e), file=file, tensor=stored) from None


def _convert(name: str, t: torch.Tensor, storage: torch.dtype | None, device: torch.device,
             huge: bool = False) -> torch.Tensor:
    """Apply the dtype rules. With storage None, tensors kept as stored stay views of the shard's
    memory map (lazy, file-backed); otherwise results never alias the map, so it can be released
    (with `huge`, a result of 2 MB or more lands on huge pages: ops/huge_pages.py). An int8 trunk's
    codes and scales stay as stored whatever the storage dtype (its kernels read them)."""
    if t.dtype == torch.int8 or _is_int8_scale(name):
        target = t.dtype
        if _is_int8_scale(name):
            check_stored_scales(t, name)
    elif name.endswith(FP32_SUFFIXES):
        target = torch.float32 if storage is None else torch.promote_types(storage, torch.float32)
    else:
        target = storage or t.dtype
    if huge and storage is not None:   # a copy either way: onto huge pages where huge_pages.empty puts it
        return huge_pages.empty(t.shape, target, device).copy_(t)
    out = t.to(device=device, dtype=target)
    if storage is not None and out.data_ptr() == t.data_ptr():
        out = out.clone()
    return out


def _narrow_a_log(name: str, t: torch.Tensor, heads: int) -> torch.Tensor:
    """Stored [head_dim] zero-padded (K3), [heads] exact, or [1, 1, heads, 1] (Kimi-Linear) -> [heads]."""
    flat = t.reshape(-1)
    if flat.numel() < heads:
        raise CheckpointError(f"A_log has {flat.numel()} entries for {heads} heads", tensor=TEXT_PREFIX + name)
    if bool((flat[heads:] != 0).any()):
        raise CheckpointError(
            "A_log entries past num_heads are not zero: this is not K3's per-head, zero-padded layout "
            "(per-channel A_log is not a K3 checkpoint)", tensor=TEXT_PREFIX + name)
    return flat[:heads].clone()


def _assign(model: nn.Module, name: str, t: torch.Tensor, config: K3Config) -> None:
    module_name, _, leaf = name.rpartition(".")
    module = model.get_submodule(module_name)
    if leaf == "A_log":
        t = _narrow_a_log(name, t, config.kda_num_heads)
    current = getattr(module, leaf)
    if current is None or tuple(current.shape) != tuple(t.shape):
        raise CheckpointError(f"shape {list(t.shape)} does not fit the module's "
                              f"{list(current.shape) if current is not None else 'nothing'}", tensor=TEXT_PREFIX + name)
    set_tensor(module, leaf, t)


def _allocate_banks(model: K3ForCausalLM, device: torch.device, storage: torch.dtype | None,
                    reader: CheckpointReader) -> dict[str, nn.Module]:
    banks = {}
    for name, module in model.named_modules():
        if isinstance(module, PackedExperts):
            for buf_name, buf in list(module.named_buffers(recurse=False)):
                module._buffers[buf_name] = huge_pages.empty(buf.shape, torch.uint8, device)
        elif isinstance(module, DenseExperts):
            stored = TORCH_FLOATS[reader.info(f"{name}.0.w1.weight")[1]] if storage is None else storage
            for p_name, p in list(module.named_parameters(recurse=False)):
                data = huge_pages.empty(p.shape, stored, device)
                module._parameters[p_name] = nn.Parameter(data, requires_grad=False)
        else:
            continue
        banks[name.removesuffix(".experts")] = module
    return banks


def _allocate_fused(model: K3ForCausalLM, device: torch.device, storage: torch.dtype | None,
                    reader: CheckpointReader, int8_names: set[str]) -> dict[str, torch.Tensor]:
    """One matrix per group of projections sharing an input (layers/fused.py), in the dtype the rules
    give its members (int8 when they are int8 weights); a group whose members would be kept in
    different dtypes stays unfused. Returns {weight name: its row block, int8 scale name: its block}."""
    names = {id(m): n for n, m in model.named_modules()}
    blocks: dict[str, torch.Tensor] = {}
    for module in model.modules():
        for key, group in list(getattr(module, "fused", {}).items()):
            members = [f"{names[id(lin)]}.weight" for lin in group.linears]
            dtypes = {torch.int8 if n in int8_names else storage or TORCH_FLOATS[reader.info(n)[1]] for n in members}
            if len(dtypes) != 1:
                del module.fused[key]
                continue
            blocks.update(zip(members, group.allocate(dtypes.pop(), device)))
            if group.scale is not None:
                blocks.update(zip([m + "_scale" for m in members], group.scale_blocks()))
    return blocks


def _fill_block(reader: CheckpointReader, spec: ExpectedTensor, blocks: dict[str, torch.Tensor], storage, device,
                quantise: bool) -> None:
    """A fused projection's weight (or int8 scales), read into its row block: positioned reads when the
    stored bytes are already what is kept (no mapping of the shard), quantised when trunk="int8" meets
    a float weight, else converted and copied."""
    _check_header(reader, spec)
    block, stored = blocks[spec.name], reader.info(spec.name)[1]
    if block.dtype == torch.int8 and stored != "I8":
        quantise_into(reader, spec.name, block, blocks[spec.name + "_scale"])
    elif device.type == "cpu" and TRUNK_DTYPES.get(stored) == block.dtype:
        reader.read_into(spec.name, block)
        if _is_int8_scale(spec.name):
            check_stored_scales(block, spec.name)
    else:
        block.copy_(_convert(spec.name, reader.get(spec.name), storage, device))


def _expert_slot(bank: nn.Module, e: int, mat: str, kind: str) -> torch.Tensor:
    name = mat if kind == "weight" else f"{mat}_{'packed' if kind == 'weight_packed' else 'scale'}"
    return getattr(bank, name)[e]
