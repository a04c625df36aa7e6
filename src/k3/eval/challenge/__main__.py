"""python -m k3.eval.challenge fetch|check [DIR]: fetch a challenge's pinned sdist into the cache (the set-up
step; `make test` runs it), or check every task of a challenge: its starting repository fails the tests
that must start passing, and its reference solution passes them all within the rules."""

from __future__ import annotations

import argparse
import json
import sys

from k3.eval.challenge import source, spec, verdict
from k3.eval.challenge.spec import ChallengeError


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m k3.eval.challenge")
    p.add_argument("action", choices=("fetch", "check"))
    p.add_argument("directory", nargs="?", default=str(spec.BUNDLED), help="a challenge directory (default: bundled)")
    args = p.parse_args(argv)
    try:
        challenge = spec.load(args.directory)
        base = source.pristine(challenge)
        if args.action == "fetch":
            print(f"{challenge.name}: {len(base)} files ready")
            return 0
        failed = 0
        for task in challenge.tasks:
            start = source.start(challenge, task, base)
            found = verdict.judge(challenge, task, start, source.apply(start, task.solution, f"{task.id} solution"))
            ok = found["resolved"] and found["rules_kept"]
            failed += not ok
            print(json.dumps({"task": task.id, "ok": ok, "required": len(verdict.required(challenge, task, start)),
                              **{k: found[k] for k in ("failing", "broken", "error")}}))
        return 1 if failed else 0
    except ChallengeError as e:
        print(f"k3 challenge: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
