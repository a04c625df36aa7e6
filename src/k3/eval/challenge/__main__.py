"""python -m k3.eval.challenge fetch|check|list|freeze [DIR]: fetch a challenge's pinned sdist into the cache
(the set-up step; `make test` runs it); check every task of a challenge (its starting repository fails
the tests that must start passing, and its reference solution passes them all within the rules); list
its tasks with each prompt's sha256; or freeze it (write the manifest of its version, repository and
prompts into challenge.json)."""

from __future__ import annotations

import argparse
import json
import sys
import time

from k3.eval.challenge import frozen, loading, parse, source, spec, verdict
from k3.eval.challenge.spec import ChallengeError


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m k3.eval.challenge")
    p.add_argument("action", choices=("fetch", "check", "list", "freeze"))
    p.add_argument("directory", nargs="?", default=str(spec.BUNDLED), help="a challenge directory (default: bundled)")
    p.add_argument("--tasks", help="check: only these task ids (comma-separated)")
    args = p.parse_args(argv)
    try:
        if args.action == "freeze":
            challenge = parse.challenge(spec.locate(args.directory))
            made = frozen.freeze(challenge.directory, source.pristine(_unfrozen(challenge)), challenge)
            print(json.dumps({"challenge": challenge.label, "repository": made["repository"], "tasks": len(made["prompts"])}))
            return 0
        challenge = loading.load(spec.locate(args.directory))
        if args.action == "list":
            print_list(challenge)
            return 0
        base = source.pristine(challenge)
        if args.action == "fetch":
            print(f"{challenge.label}: {len(base)} files ready")
            return 0
        return check(challenge, base, args.tasks.split(",") if args.tasks else None)
    except ChallengeError as e:
        print(f"k3 challenge: {e}", file=sys.stderr)
        return 2


def _unfrozen(challenge):
    """The challenge without its manifest, so the repository is read as it is now."""
    from dataclasses import replace

    return replace(challenge, frozen=None)


def print_list(challenge: spec.Challenge, fingerprint: str | None = None) -> None:
    """One line a task: id, kind, its chain and step, the sha256 of its prompt; the version (and the task's
    fingerprint, which its logs carry) first."""
    what = "fingerprint" if fingerprint else "data fingerprint"     # the task's adds the judge's source
    fingerprint = fingerprint or challenge.fingerprint()
    print(f"{challenge.label}  {what} {fingerprint[:16]}  {len(challenge.every_task)} tasks")
    for t in challenge.every_task:
        where = f"{t.chain}#{t.step}" if t.chain else "-"
        print(f"{t.id:<22} {t.kind:<8} {where:<8} {challenge.prompt_sha256(t)}")


def check(challenge: spec.Challenge, base: dict, only: list[str] | None) -> int:
    failed = 0
    for task_id, job in source.jobs(challenge, base).items():
        if only and task_id not in only:
            continue
        t0 = time.perf_counter()
        final = source.apply(job.start, job.task.solution, f"{task_id} solution")
        found = verdict.judge(job, final)
        ok = found["resolved"] and found["rules_kept"]
        failed += not ok
        print(json.dumps({"task": task_id, "ok": ok, "required": len(verdict.required(job)),
                          **{k: found[k] for k in ("failing", "broken", "error", "judge_s")},
                          "seconds": round(time.perf_counter() - t0, 2)}))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
