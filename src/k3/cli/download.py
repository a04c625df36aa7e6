"""k3 download [REPO] [--from URL ...] [--dest DIR] [--include PATTERN ...] [--jobs N]

REPO (a Hugging Face repo id, e.g. moonshotai/Kimi-K3) downloads from HF_ENDPOINT (default
https://huggingface.co) with HF_TOKEN, into K3_MODELS_DIR/REPO, where every command finds it by that id."""

from __future__ import annotations

import json
import sys


def add_arguments(p) -> None:
    p.add_argument("repo", nargs="?", metavar="REPO", help="Hugging Face repo id (ORG/NAME)")
    p.add_argument("--revision", default="main", help="with REPO: branch, tag or commit")
    p.add_argument("--from", dest="mirrors", action="append", metavar="URL",
                   help="mirror base URL (repeatable; e.g. https://huggingface.co/ORG/REPO/resolve/REV/); with REPO, "
                        "tried after HF_ENDPOINT")
    p.add_argument("--dest", help="directory to download into (nothing is written outside it); default with REPO: "
                                  "K3_MODELS_DIR/REPO (~/.cache/k3/models/REPO)")
    p.add_argument("--include", action="append", metavar="PATTERN",
                   help="fetch only matching shards (glob), or a group: @meta (no shards), @trunk "
                        "(shards with non-expert tensors); repeatable")
    p.add_argument("--jobs", type=int, default=4, help="parallel ranged requests (default 4)")
    p.add_argument("--manifest", help="sha256 manifest (path or URL): the file list and checksums")
    p.add_argument("--chunk-size", default="32MiB", help="bytes per ranged request (default 32MiB)")
    p.add_argument("--max-rate", help="bandwidth limit, bytes per second (e.g. 50MB)")
    p.add_argument("--retries", type=int, default=6, help="attempts per chunk beyond the first (default 6)")
    p.add_argument("--stall-timeout", type=float, default=30.0, help="seconds without data before retrying")
    p.add_argument("--token", help="bearer token for mirrors that need one (default with REPO: $HF_TOKEN)")


def _source(args) -> tuple[list[str], str, str | None]:
    """(mirrors, destination, token) from REPO and/or --from/--dest/--token."""
    import os

    from k3.models import hub_mirror, is_repo_id, models_dir

    if args.repo is None:
        if not args.mirrors or not args.dest:
            raise ValueError("give a repo id (k3 download moonshotai/Kimi-K3), or --from URL and --dest DIR")
        return args.mirrors, args.dest, args.token
    if not is_repo_id(args.repo):
        raise ValueError(f"{args.repo!r} is not a repo id (ORG/NAME, e.g. moonshotai/Kimi-K3)")
    mirrors = [hub_mirror(args.repo, args.revision)] + (args.mirrors or [])
    return mirrors, args.dest or str(models_dir() / args.repo), args.token or os.environ.get("HF_TOKEN")


def run(args) -> int:
    from pathlib import Path

    from k3.config.units import parse_size
    from k3.tools.download import DownloadError, DownloadOptions, download

    if args.jobs < 1:
        raise ValueError("--jobs must be >= 1")
    mirrors, dest, token = _source(args)
    opts = DownloadOptions(mirrors=mirrors, dest=Path(dest), include=args.include, jobs=args.jobs,
                           chunk_size=parse_size(args.chunk_size), manifest=args.manifest,
                           max_rate=parse_size(args.max_rate) if args.max_rate else None, retries=args.retries,
                           stall_timeout=args.stall_timeout, token=token)
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
