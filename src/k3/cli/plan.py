"""k3 plan TARGET --memory-budget SIZE [--cache-memory SIZE] [--dtype fp32] [--disk-bandwidth SIZE] [--json]"""

from __future__ import annotations

import json


def add_arguments(p) -> None:
    p.add_argument("target", help="checkpoint directory, config.json, or preset (k3 = the released model)")
    p.add_argument("--memory-budget", required=True, help="memory for weights + sequence state (e.g. 64GB)")
    p.add_argument("--cache-memory", default="1GiB", help="sequence-state cache inside the budget (default 1GiB)")
    p.add_argument("--dtype", choices=["stored", "fp32", "bf16"], default="stored",
                   help="weight storage: as stored (CPU default), or converted")
    p.add_argument("--disk-bandwidth", help="skip measuring: the drive's read bandwidth, bytes/s (e.g. 3GB)")
    p.add_argument("--json", action="store_true")


def run(args) -> int:
    from pathlib import Path

    from k3.cli.target import resolve_config
    from k3.config.units import parse_size
    from k3.offload import plan_memory
    from k3.tools.machine import measure_disk, measure_memory

    config, ckpt, name = resolve_config(args.target)
    itemsize = {"stored": None, "fp32": 4, "bf16": 2}[args.dtype]
    plan = plan_memory(config, parse_size(args.memory_budget, "--memory-budget"), storage_itemsize=itemsize,
                       state_bytes=parse_size(args.cache_memory, "--cache-memory"))
    if args.disk_bandwidth:
        disk = float(parse_size(args.disk_bandwidth, "--disk-bandwidth"))
    else:
        shards = sorted(Path(ckpt).glob("*.safetensors"), key=lambda p: p.stat().st_size) if ckpt else []
        disk = measure_disk(Path(ckpt or "."), shards[-1] if shards else None)[0]
    mem = measure_memory()
    seconds = plan.seconds_per_token(disk, mem)
    result = plan.to_dict() | {"disk_bytes_per_s": disk, "mem_bytes_per_s": mem, "seconds_per_token": seconds}
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
    print(f"  disk {disk / g:,.2f} GB/s, memory {mem / g:,.2f} GB/s -> about {seconds:,.3f} s per token at batch 1")
    return 0
