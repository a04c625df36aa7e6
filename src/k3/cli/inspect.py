"""k3 inspect TARGET [--json]"""

from __future__ import annotations

import json
import sys


def add_arguments(p) -> None:
    p.add_argument("target", nargs="?", default="default",
                   help="checkpoint directory, config.json, or preset name (k3 = the released model); default: the "
                        "bundled model")
    p.add_argument("--json", action="store_true", help="print one JSON document instead of the table")


def run(args) -> int:
    from k3.cli.target import resolve_config
    from k3.tools.inspect import format_summary, summarize

    config, ckpt, name = resolve_config(args.target)
    summary = summarize(config, ckpt)
    missing = missing_shards(ckpt) if ckpt is not None else []
    out = summary.to_dict() | ({"missing_shards": missing} if ckpt is not None else {})
    print(json.dumps(out) if args.json else format_summary(name, config, summary))
    if missing:   # what the config describes is still shown; the exit code and this line say it is not all there
        print(f"k3 inspect: the checkpoint is incomplete: {len(missing)} shard file(s) its index names are missing "
              f"({', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''}); `k3 download` resumes, "
              "`k3 verify` checks the rest", file=sys.stderr)
        return 1
    return 0


def missing_shards(ckpt) -> list[str]:
    """Shard files the checkpoint's index names (or the single file it needs) that are not on disk."""
    from pathlib import Path

    from k3.checkpoint.errors import CheckpointError
    from k3.checkpoint.reader import shard_map

    root = Path(ckpt)
    try:
        return sorted(f for f in shard_map(root) if not (root / f).is_file())
    except CheckpointError:   # no index and no shards at all: a config alone
        return ["*.safetensors (none, and no index)"]
