"""k3 plan TARGET --memory-budget SIZE [--cache-memory SIZE] [--dtype fp32] [--disk-bandwidth SIZE]
[--memory-bandwidth SIZE] [--measure] [--json]

Bandwidths: given, else (for a checkpoint directory, or with --measure) measured once and cached in
~/.cache/k3/bandwidth.json per drive; a preset or config.json alone measures nothing and assumes an NVMe
drive and this machine's cached memory figure (or a typical one), saying so."""

from __future__ import annotations

import json


def add_arguments(p) -> None:
    p.add_argument("target", help="checkpoint directory, config.json, or preset (k3 = the released model)")
    p.add_argument("--memory-budget", required=True, help="memory for weights + sequence state (e.g. 64GB)")
    p.add_argument("--cache-memory", default="1GiB", help="sequence-state cache inside the budget (default 1GiB)")
    p.add_argument("--dtype", choices=["stored", "fp32", "bf16"], default="stored",
                   help="weight storage: as stored (CPU default), or converted")
    p.add_argument("--disk-bandwidth", help="skip measuring: the drive's read bandwidth, bytes/s (e.g. 3GB)")
    p.add_argument("--memory-bandwidth", help="skip measuring: memory read bandwidth, bytes/s (e.g. 40GB)")
    p.add_argument("--measure", action="store_true", help="measure the bandwidths now (and cache them)")
    p.add_argument("--json", action="store_true")


def run(args) -> int:
    from k3.cli.target import resolve_config
    from k3.config.units import parse_size
    from k3.offload import plan_memory

    config, ckpt, name = resolve_config(args.target)
    itemsize = {"stored": None, "fp32": 4, "bf16": 2}[args.dtype]
    plan = plan_memory(config, parse_size(args.memory_budget, "--memory-budget"), storage_itemsize=itemsize,
                       state_bytes=parse_size(args.cache_memory, "--cache-memory"))
    (disk, disk_how), (mem, mem_how) = bandwidths(args, ckpt)
    seconds = plan.seconds_per_token(disk, mem)
    result = plan.to_dict() | {"disk_bytes_per_s": disk, "mem_bytes_per_s": mem, "seconds_per_token": seconds,
                               "disk_bandwidth_source": disk_how, "memory_bandwidth_source": mem_how}
    if args.json:
        print(json.dumps(result))
        return 0
    g = 1e9
    print(f"memory plan for {name}, budget {plan.budget / g:,.2f} GB: {plan.mode}")
    print(f"  resident: trunk {plan.trunk_bytes / g:,.2f} GB, sequence state {plan.state_bytes / g:,.2f} GB, "
          f"experts {plan.expert_slots:,} of {plan.num_experts_total:,} ({plan.expert_cache_bytes / g:,.2f} GB); "
          f"embedding {plan.embedding_bytes / g:,.2f} GB " + ("resident" if plan.embedding_resident else "read by row"))
    print(f"  per token: experts {plan.expert_bytes_per_token / g:,.3f} GB needed, "
          f"{plan.streamed_bytes_per_token / g:,.3f} GB streamed (expected hit rate {plan.expected_hit_rate:.1%})")
    print(f"  disk {disk / g:,.2f} GB/s ({disk_how}), memory {mem / g:,.2f} GB/s ({mem_how}) -> about {seconds:,.3f} s "
          "per token at batch 1")
    return 0


ASSUMED_DISK = 3e9      # a PCIe 3 NVMe drive's sequential read
ASSUMED_MEMORY = 20e9   # a desktop's practical decode floor


def bandwidths(args, ckpt) -> tuple[tuple[float, str], tuple[float, str]]:
    """((disk bytes/s, where it came from), (memory bytes/s, where it came from))."""
    from pathlib import Path

    from k3.config.units import parse_size
    from k3.tools.bandwidth_cache import cached, remember
    from k3.tools.machine import measure_disk, measure_memory

    def one(given, flag, key, measure, assumed):
        if given:
            return float(parse_size(given, flag)), "given"
        if not args.measure and cached(key) is not None:
            return cached(key), "cached"
        if measure is None:
            return assumed, f"assumed; pass {flag} or --measure"
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
