"""k3 download --from URL [--from URL2 ...] --dest DIR [--include PATTERN ...] [--jobs N]"""

from __future__ import annotations

import json
import sys


def add_arguments(p) -> None:
    p.add_argument("--from", dest="mirrors", action="append", required=True, metavar="URL",
                   help="mirror base URL (repeatable; e.g. https://huggingface.co/ORG/REPO/resolve/REV/)")
    p.add_argument("--dest", required=True, help="directory to download into (nothing is written outside it)")
    p.add_argument("--include", action="append", metavar="PATTERN",
                   help="fetch only matching shards (glob), or a group: @meta (no shards), @trunk "
                        "(shards with non-expert tensors); repeatable")
    p.add_argument("--jobs", type=int, default=4, help="parallel ranged requests (default 4)")
    p.add_argument("--manifest", help="sha256 manifest (path or URL): the file list and checksums")
    p.add_argument("--chunk-size", default="32MiB", help="bytes per ranged request (default 32MiB)")
    p.add_argument("--max-rate", help="bandwidth limit, bytes per second (e.g. 50MB)")
    p.add_argument("--retries", type=int, default=6, help="attempts per chunk beyond the first (default 6)")
    p.add_argument("--stall-timeout", type=float, default=30.0, help="seconds without data before retrying")
    p.add_argument("--token", help="bearer token for mirrors that need one (e.g. a Hugging Face token)")


def run(args) -> int:
    from pathlib import Path

    from k3.config.units import parse_size
    from k3.tools.download import DownloadError, DownloadOptions, download

    if args.jobs < 1:
        raise ValueError("--jobs must be >= 1")
    opts = DownloadOptions(mirrors=args.mirrors, dest=Path(args.dest), include=args.include, jobs=args.jobs,
                           chunk_size=parse_size(args.chunk_size), manifest=args.manifest,
                           max_rate=parse_size(args.max_rate) if args.max_rate else None, retries=args.retries,
                           stall_timeout=args.stall_timeout, token=args.token)
    try:
        summary = download(opts)
    except DownloadError as e:
        raise ValueError(str(e)) from None
    s = summary.to_dict()
    print(f"{len(s['downloaded'])} file(s) downloaded, {len(s['skipped'])} already complete; "
          f"{s['bytes']:,} bytes in {s['seconds']:.1f}s ({s['bytes_per_s'] / 1e6:.1f} MB/s), "
          f"{s['retries']} retries, {s['failovers']} mirror failovers")
    if s["unhashed"]:
        print(f"warning: {len(s['unhashed'])} of {len(s['downloaded'])} downloaded file(s) were checked by size and "
              "header only (no --manifest, and the mirror offered no sha256): a changed byte inside them would go "
              "unnoticed. Pass --manifest FILE (sha256sum or k3 JSON) to check them, or run "
              f"`k3 verify {args.dest} --scan`", file=sys.stderr)
    print(json.dumps(s))
    return 0
