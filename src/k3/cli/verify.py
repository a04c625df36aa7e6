"""k3 verify DIR [--manifest FILE] [--write-manifest FILE] [--no-hash] [--json]"""

from __future__ import annotations

import json
import sys


MAX_JSON_PROBLEMS = 1000   # with problems_total and problems_by_kind beside them


def add_arguments(p) -> None:
    p.add_argument("dir", help="checkpoint directory")
    p.add_argument("--manifest", help="check sizes and sha256 against this manifest (k3 JSON or sha256sum text)")
    p.add_argument("--write-manifest", metavar="FILE",
                   help="after a clean verify, hash every file and write a manifest (k3 JSON)")
    p.add_argument("--no-hash", action="store_true", help="with --manifest, compare sizes only")
    p.add_argument("--no-scales", action="store_true", help="skip the scan of MXFP4 scale bytes")
    p.add_argument("--scan", action="store_true",
                   help="read every BF16/F16/F32 weight and report NaN/Inf by tensor (reads the whole checkpoint)")
    p.add_argument("--json", action="store_true", help="print the report as one JSON document")


def run(args) -> int:
    from k3.tools.manifest_write import write_checkpoint_manifest
    from k3.tools.progress import byte_progress
    from k3.tools.verify import verify_checkpoint

    hashing = bool(args.manifest) and not args.no_hash
    label = " and ".join(["scanning"] * args.scan + ["hashing"] * hashing)
    with byte_progress(label, enabled=bool(label)) as tick:      # silent when nothing is read in bulk
        report = verify_checkpoint(args.dir, args.manifest, check_scales=not args.no_scales,
                                   hash_files=not args.no_hash, progress=tick, scan=args.scan)
    if args.json:
        out = report.to_dict()
        kinds: dict[str, int] = {}
        for p in report.problems:
            kinds[p.kind] = kinds.get(p.kind, 0) + 1
        out |= {"problems": out["problems"][:MAX_JSON_PROBLEMS], "problems_total": len(report.problems),
                "problems_by_kind": kinds}
        print(json.dumps(out))
    else:
        _print(report)
    if not report.ok:
        return 1
    if args.write_manifest:
        with byte_progress("hashing") as tick:
            n = write_checkpoint_manifest(args.dir, args.write_manifest, progress=tick)
        print(f"wrote a manifest of {n} files to {args.write_manifest}", file=sys.stderr)
    return 0


SHOWN_PER_KIND = 10


def _print(report) -> None:
    """The status line, then at most SHOWN_PER_KIND problems of each kind with a count of the rest: a broken
    checkpoint of 300,000 tensors is a screenful, not 600,000 lines."""
    status = "OK" if report.ok else f"{len(report.problems):,} PROBLEM(S)"
    print(f"{report.root}: {status} - {report.files} shard(s), {report.tensors} tensors, "
          f"{report.bytes_hashed:,} bytes hashed")
    by_kind: dict[str, list] = {}
    for p in report.problems:
        by_kind.setdefault(p.kind, []).append(p)
    for kind, problems in by_kind.items():
        for p in problems[:SHOWN_PER_KIND]:
            print(f"  {p}")
        if len(problems) > SHOWN_PER_KIND:
            print(f"  ... and {len(problems) - SHOWN_PER_KIND:,} more [{kind}] problems (--json lists up to "
                  f"{MAX_JSON_PROBLEMS:,})")
    for w in report.warnings[:20]:
        print(f"  warning: {w}")
    if len(report.warnings) > 20:
        print(f"  ... and {len(report.warnings) - 20} more warnings (--json lists all)")
