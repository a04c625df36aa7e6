"""k3 inspect TARGET [--json]"""

from __future__ import annotations

import json


def add_arguments(p) -> None:
    p.add_argument("target", help="checkpoint directory, config.json, or preset name (k3 = the released model)")
    p.add_argument("--json", action="store_true", help="print one JSON document instead of the table")


def run(args) -> int:
    from k3.cli.target import resolve_config
    from k3.tools.inspect import format_summary, summarize

    config, ckpt, name = resolve_config(args.target)
    summary = summarize(config, ckpt)
    print(json.dumps(summary.to_dict()) if args.json else format_summary(name, config, summary))
    return 0
