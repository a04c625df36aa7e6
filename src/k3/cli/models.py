"""k3 models [--json]: the models on this machine (the bundled one, downloads, hub snapshots of K3 models)."""

from __future__ import annotations

import json


def add_arguments(p) -> None:
    p.add_argument("--json", action="store_true", help="one JSON document instead of the table")


def run(args) -> int:
    from k3.tools.model_list import local_models

    found = local_models()
    if args.json:
        print(json.dumps([m.to_dict() for m in found]))
        return 0
    width = max(len(m.name) for m in found)
    print(f"{'MODEL':<{width}}  {'SIZE':>9}  STATUS  (PATH)")
    for m in found:
        print(f"{m.name:<{width}}  {m.bytes / 1e9:>7.2f} GB  {m.status}  ({m.path})")
    return 0
