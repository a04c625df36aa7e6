"""python -m k3.testing.llama_cpp build [--jobs N] [--server] | where"""

from __future__ import annotations

import argparse
import sys

from k3.testing.llama_cpp.build import AnchorError, build, cache_dir, is_built


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m k3.testing.llama_cpp")
    ap.add_argument("action", choices=["build", "where"])
    ap.add_argument("--jobs", type=int, default=None)
    ap.add_argument("--server", action="store_true", help="build llama-server too")
    args = ap.parse_args()
    if args.action == "where":
        print(f"{cache_dir()} ({'built' if is_built() else 'not built'})")
        return 0
    try:
        root = build(jobs=args.jobs, log=lambda s: print(s, file=sys.stderr, flush=True), server=args.server)
    except AnchorError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"llama.cpp built in {root}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
