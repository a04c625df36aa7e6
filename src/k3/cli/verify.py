"""k3 verify DIR [--manifest FILE] [--write-manifest FILE] [--no-hash] [--json]"""

from __future__ import annotations

import json
import sys


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

    with byte_progress("scanning and hashing" if args.scan else "hashing") as tick:
        report = verify_checkpoint(args.dir, args.manifest, check_scales=not args.no_scales,
                                   hash_files=not args.no_hash, progress=tick, scan=args.scan)
    if args.json:
        print(json.dumps(report.to_dict()))
    else:
        _print(report)
    if not report.ok:
        return 1
    if args.write_manifest:
        with byte_progress("hashing") as tick:
            n = write_checkpoint_manifest(args.dir, args.write_manifest, progress=tick)
        print(f"wrote a manifest of {n} files to {args.write_manifest}", file=sys.stderr)
    return 0


def _print(report) -> None:
    status = "OK" if report.ok else f"{len(report.problems)} PROBLEM(S)"
    print(f"{report.root}: {status} - {report.files} shard(s), {report.tensors} tensors, "
          f"{report.bytes_hashed:,} bytes hashed")
    for p in report.problems:
        print(f"  {p}")
    for w in report.warnings[:20]:
        print(f"  warning: {w}")
    if len(report.warnings) > 20:
        print(f"  ... and {len(report.warnings) - 20} more warnings (--json lists all)")
