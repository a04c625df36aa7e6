"""Checkpoint tools side by side on one random `mid` checkpoint (320 MB, 6 shards, official layout):
download over loopback (1 vs 4 parallel ranged requests; a mirror that drops connections), verify (headers + scales; with sha256 manifest), quantize (dense
experts -> MXFP4), each against the raw speed of the same operation (a plain file copy / sha256).

    .venv/bin/python benchmarks/checkpoint_tools.py

Prints a table, then one JSON line. Loopback has no network latency: download figures show the
tool's own overhead ceiling, not a real mirror's speed.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
import time
from pathlib import Path

from k3.checkpoint.manifest import FileDigest, sha256_file, write_manifest
from k3.config.presets import mid
from k3.testing import make_checkpoint
from k3.testing.http_mirror import Faults, Mirror
from k3.tools.download import DownloadOptions, download
from k3.tools.quantize import quantize_checkpoint
from k3.tools.verify import verify_checkpoint


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def total_bytes(d: Path) -> int:
    return sum(p.stat().st_size for p in d.iterdir() if p.is_file())


def fetch(src: Path, dest: Path, jobs: int, faults: Faults | None = None) -> float:
    with Mirror(src, faults) as m:
        _, s = timed(lambda: download(DownloadOptions([m.url], dest, jobs=jobs, chunk_size=8 * 2 ** 20,
                                                      backoff=0.01, log=lambda _: None)))
    return s


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="k3-bench-ckpt-"))
    src = make_checkpoint(work / "src", mid(), num_shards=6, seed=0)
    size = total_bytes(src)
    rows = {}
    _, s = timed(lambda: [shutil.copyfile(p, work / p.name) for p in src.iterdir() if p.is_file()])
    rows["plain copy (reference)"] = s
    _, s = timed(lambda: [hashlib.file_digest(open(p, "rb"), "sha256") for p in src.iterdir() if p.is_file()])
    rows["plain sha256 (reference)"] = s
    rows["download, 1 job"] = fetch(src, work / "d1", 1)
    rows["download, 4 jobs"] = fetch(src, work / "d4", 4)
    rows["download, drops every 3rd response"] = fetch(src, work / "dd", 4, Faults(drop_after=3 * 2 ** 20,
                                                                                  drop_times=12))
    rows["verify (headers, layout, scales)"] = timed(lambda: verify_checkpoint(src))[1]
    manifest = work / "manifest.json"
    write_manifest(manifest, {p.name: FileDigest(p.stat().st_size, sha256_file(p)) for p in src.iterdir()})
    report, rows["verify + sha256 manifest"] = timed(lambda: verify_checkpoint(src, manifest))
    assert report.ok
    dense = make_checkpoint(work / "dense", mid().replace(expert_format=None), num_shards=6, seed=0)
    q, rows["quantize (dense experts -> MXFP4)"] = timed(lambda: quantize_checkpoint(dense, work / "q",
                                                                                     log=lambda _: None))
    dense_size = total_bytes(dense)
    print(f"checkpoint: {size / 1e6:.0f} MB ({dense_size / 1e6:.0f} MB with dense experts)")
    print(f"{'operation':<40}{'seconds':>9}{'MB/s':>9}")
    result = {}
    for name, sec in rows.items():
        nbytes = dense_size if name.startswith("quantize") else size
        print(f"{name:<40}{sec:>9.2f}{nbytes / sec / 1e6:>9.0f}")
        result[name] = {"seconds": round(sec, 3), "MB_per_s": round(nbytes / sec / 1e6, 1)}
    result["quantize_max_rel_l2"] = q.to_dict()["max_rel_l2"]
    result["bytes"] = size
    shutil.rmtree(work)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
