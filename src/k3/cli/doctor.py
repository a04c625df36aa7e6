"""k3 doctor DIR_OR_CONFIG_OR_PRESET [--memory-budget SIZE] [--no-measure] [--json]"""

from __future__ import annotations

import json

from k3.cli.trunk_arg import add_trunk_argument


def add_arguments(p) -> None:
    p.add_argument("target", nargs="?", default="default",
                   help="checkpoint directory, config.json, or preset (k3 = the released model); default: the bundled "
                        "model")
    p.add_argument("--memory-budget", help="memory to plan for (e.g. 64GB); default 90%% of available RAM")
    p.add_argument("--cache-memory", default="1GiB", help="sequence-state cache inside the budget (as k3 plan)")
    add_trunk_argument(p)
    p.add_argument("--no-measure", action="store_true", help="skip the disk and memory bandwidth measurements")
    p.add_argument("--json", action="store_true", help="print one JSON document instead of the report")
    p.add_argument("--no-vision", action="store_true", help="plan for the text model alone (as --no-vision loads it)")


def run(args) -> int:
    from pathlib import Path

    from k3.cli.target import resolve_config
    from k3.config.model import ConfigError
    from k3.config.units import parse_size
    from k3.tools.doctor import diagnose
    from k3.tools.doctor_format import format_doctor

    config, ckpt, name, error = None, None, args.target, None
    try:
        config, ckpt, name = resolve_config(args.target)
        config = config.replace(vision=None) if args.no_vision else config
    except ConfigError as e:
        error = str(e)
        p = Path(args.target)
        ckpt = p if p.is_dir() else None
    budget = parse_size(args.memory_budget) if args.memory_budget else None
    report = diagnose(name, config, ckpt, config_error=error, budget=budget, measure=not args.no_measure,
                      int8_at_load=args.trunk == "int8", state_bytes=parse_size(args.cache_memory, "--cache-memory"))
    print(json.dumps(report.to_dict()) if args.json else format_doctor(report))
    return 1 if report.problems or error else 0
