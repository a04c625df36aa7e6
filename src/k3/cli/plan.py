"""k3 plan TARGET --memory-budget SIZE [--cache-memory SIZE] [--dtype fp32] [--disk-bandwidth SIZE]
[--memory-bandwidth SIZE] [--measure] [--json]

Bandwidths: given, else (for a checkpoint directory, or with --measure) measured once and cached in
~/.cache/k3/bandwidth.json per drive; a preset or config.json alone measures nothing and assumes an NVMe
drive and this machine's cached memory figure (or a typical one), saying so."""

from __future__ import annotations

import json
import sys

from k3.cli.trunk_arg import add_trunk_argument


def add_arguments(p) -> None:
    p.add_argument("target", nargs="?", default="default",
                   help="checkpoint directory, config.json, or preset (k3 = the released model); default: the bundled "
                        "model")
    p.add_argument("--memory-budget", required=True, help="memory for weights + sequence state (e.g. 64GB)")
    p.add_argument("--cache-memory", default="1GiB", help="sequence-state cache inside the budget (default 1GiB)")
    p.add_argument("--dtype", choices=["stored", "fp32", "bf16"], default="stored",
                   help="weight storage: as stored (CPU default), or converted")
    add_trunk_argument(p)
    p.add_argument("--disk-bandwidth", help="skip measuring: the drive's read bandwidth, bytes/s (e.g. 3GB)")
    p.add_argument("--memory-bandwidth", help="skip measuring: memory read bandwidth, bytes/s (e.g. 40GB)")
    p.add_argument("--measure", action="store_true", help="measure the bandwidths now (and cache them)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--no-vision", action="store_true", help="plan for the text model alone (as --no-vision loads it)")


def run(args) -> int:
    from k3.cli.target import resolve_config
    from k3.config.units import parse_size
    from k3.streaming import minimum_budget, plan_memory

    config, ckpt, name = resolve_config(args.target)
    if args.no_vision:
        config = config.replace(vision=None)
    itemsize = {"stored": None, "fp32": 4, "bf16": 2}[args.dtype]
    state = parse_size(args.cache_memory, "--cache-memory")
    int8_at_load = args.trunk == "int8"   # the planner ignores it for an int8 checkpoint
    plan = plan_memory(config, parse_size(args.memory_budget, "--memory-budget"), storage_itemsize=itemsize,
                       state_bytes=state, int8_at_load=int8_at_load)
    least = minimum_budget(config, storage_itemsize=itemsize, state_bytes=state, int8_at_load=int8_at_load)
    (disk, disk_how), (mem, mem_how) = bandwidths(args, ckpt)
    seconds = plan.seconds_per_token(disk, mem)
    result = plan.to_dict() | {"disk_bytes_per_s": disk, "mem_bytes_per_s": mem, "seconds_per_token": seconds,
                               "disk_bandwidth_source": disk_how, "memory_bandwidth_source": mem_how,
                               "minimum_budget": least}
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"memory plan for {name}, budget {plan.budget / G:,.2f} GB (at least {least / G:,.2f} GB): {plan.mode}")
    for line in describe(plan):
        print("  " + line)
    print(f"  disk {disk / G:,.2f} GB/s ({disk_how}), memory {mem / G:,.2f} GB/s ({mem_how}) -> about {seconds:,.3f} s "
          "per token at batch 1")
    return 0


G = 1e9


def describe(plan) -> list[str]:
    """What stays, what streams and why, in lines for people (k3 plan)."""
    trunk = f"trunk {plan.trunk_bytes / G:,.2f} GB" + (" (int8, quantised at load)" if plan.int8_at_load else "")
    if plan.streamed_layers:
        kept = plan.trunk_bytes - plan.streamed_trunk_resident_bytes
        trunk = (f"trunk {kept / G:,.2f} GB of {plan.trunk_bytes / G:,.2f} GB (every layer's norms, routers and small "
                 f"tensors, lm_head, and the large matrices of all but {len(plan.streamed_layers)} layers"
                 + (", those int8" if plan.int8_at_load else "") + "), "
                 f"{plan.trunk_arena_bytes / G:,.2f} GB of arenas for the streamed layers")
    lines = [f"resident: {trunk}, sequence state {plan.state_bytes / G:,.2f} GB, experts {plan.expert_slots:,} of "
             f"{plan.num_experts_total:,} ({plan.expert_cache_bytes / G:,.2f} GB); embedding "
             f"{plan.embedding_bytes / G:,.2f} GB " + ("resident" if plan.embedding_resident else "read by row")
             + (f"; vision tower {plan.vision_bytes / G:,.2f} GB (weights, and the activations of the largest image; "
                "--no-vision leaves it out)" if plan.vision_bytes else "")]
    if plan.streamed_layers:
        lines.append(f"streamed layers {_ranges(plan.streamed_layers)}: {plan.streamed_trunk_bytes / G:,.2f} GB of "
                     "matrices read from the shards each token" + (" (as stored: bf16)" if plan.int8_at_load else "")
                     + ", the next layer's read in flight; trunk bytes stay before experts because each is read "
                     "every token, an expert only by the tokens routed to it")
    lines.append(f"per token: experts {plan.expert_bytes_per_token / G:,.3f} GB needed, trunk "
                 f"{plan.trunk_streamed_bytes_per_token / G:,.3f} GB and experts "
                 f"{(plan.streamed_bytes_per_token - plan.trunk_streamed_bytes_per_token) / G:,.3f} GB streamed "
                 f"(expected expert hit rate {plan.expected_hit_rate:.1%})")
    return lines


def _ranges(layers: tuple[int, ...]) -> str:
    """(0, 1, 2, 5, 7, 8) -> "0-2, 5, 7-8"."""
    out, start = [], None
    for i, x in enumerate(layers):
        start = x if start is None else start
        if i + 1 == len(layers) or layers[i + 1] != x + 1:
            out.append(str(start) if start == x else f"{start}-{x}")
            start = None
    return ", ".join(out)


ASSUMED_DISK = 3e9      # a PCIe 3 NVMe drive's sequential read
ASSUMED_MEMORY = 20e9   # a desktop's practical decode floor


def bandwidths(args, ckpt) -> tuple[tuple[float, str], tuple[float, str]]:
    """((disk bytes/s, where it came from), (memory bytes/s, where it came from))."""
    from pathlib import Path

    from k3.config.units import parse_size
    from k3.tools.bandwidth_cache import cached, measured_on, remember
    from k3.tools.machine import measure_disk, measure_memory

    def one(given, flag, key, measure, assumed):
        if given:
            return float(parse_size(given, flag)), "given"
        if not args.measure and cached(key) is not None:
            # a busy moment's measurement would stand for good: say when, and how to measure again
            return cached(key), f"cached from {measured_on(key) or 'an earlier run'}; --measure measures again"
        if measure is None:
            return assumed, f"assumed; pass {flag} or --measure"
        print(f"k3 plan: measuring {key.split(':')[0]} read bandwidth (once; cached for next time, "
              f"--measure measures again; {flag} skips it)",
              file=sys.stderr, flush=True)
        return remember(key, measure()), "measured"

    drive = Path(ckpt) if ckpt else None
    measure_drive = None
    if drive is not None or args.measure:
        where = drive or Path(".")
        shards = sorted(where.glob("*.safetensors"), key=lambda p: p.stat().st_size) if drive else []
        measure_drive = lambda: measure_disk(where, shards[-1] if shards else None)[0]  # noqa: E731
    disk_key = f"disk:{(drive or Path('.')).resolve().stat().st_dev}"
    disk = one(args.disk_bandwidth, "--disk-bandwidth", disk_key, measure_drive, ASSUMED_DISK)
    mem = one(args.memory_bandwidth, "--memory-bandwidth", "memory", measure_memory, ASSUMED_MEMORY)
    return disk, mem
