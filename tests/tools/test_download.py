"""k3 download against loopback mirrors that misbehave: the result is complete and verified, or the
command fails clearly; a corrupt or partial file never appears under its final name."""

from __future__ import annotations

import filecmp
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from k3.checkpoint.manifest import FileDigest, sha256_file, write_manifest
from k3.checkpoint.reader import INDEX_FILE
from k3.config.presets import tiny
from k3.testing import make_checkpoint
from k3.testing.http_mirror import Faults, Mirror
from k3.tools.download import DownloadError, DownloadOptions, download
from k3.tools.verify import verify_checkpoint

CHUNK = 16 * 1024


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    return make_checkpoint(tmp_path_factory.mktemp("src"), tiny(), num_shards=3, seed=3)


def options(dest: Path, *mirrors: Mirror, **kw) -> DownloadOptions:
    kw.setdefault("chunk_size", CHUNK)
    kw.setdefault("backoff", 0.01)
    kw.setdefault("stall_timeout", 2.0)
    return DownloadOptions(mirrors=[m.url for m in mirrors], dest=dest, log=lambda msg: None, **kw)


def assert_same_checkpoint(src: Path, dest: Path) -> None:
    names = sorted(p.name for p in src.iterdir() if p.is_file())
    assert sorted(p.name for p in dest.iterdir() if p.is_file()) == names
    match, mismatch, errors = filecmp.cmpfiles(src, dest, names, shallow=False)
    assert not mismatch and not errors
    assert verify_checkpoint(dest).ok


def shards(src: Path) -> list[str]:
    return sorted(p.name for p in src.glob("*.safetensors"))


def test_clean_download_uses_parallel_ranged_requests(source, tmp_path):
    with Mirror(source) as m:
        summary = download(options(tmp_path / "d", m, jobs=4))
    assert_same_checkpoint(source, tmp_path / "d")
    ranged = [r for r in m.requests if r[1] and r[2] == 206 and r[1] != "bytes=0-0"]
    assert len(ranged) > 3 * len(shards(source))  # several chunks per shard
    assert set(summary.downloaded) >= set(shards(source)) and summary.retries == 0
    assert not any((tmp_path / "d" / ".k3-download").glob("*.part"))


@pytest.mark.parametrize("faults", [
    Faults(drop_after=5000, drop_times=6),
    Faults(fail_500_times=5),
    Faults(ignore_range=True),
    Faults(stall_after=3000, stall_times=2, stall_seconds=3.0),
], ids=["drops-mid-body", "http-500", "ignores-range", "stalls"])
def test_faulty_mirror_still_gives_a_complete_verified_checkpoint(source, tmp_path, faults):
    with Mirror(source, faults) as m:
        summary = download(options(tmp_path / "d", m, jobs=3, stall_timeout=0.5))
    assert_same_checkpoint(source, tmp_path / "d")
    if not faults.ignore_range:
        assert summary.retries > 0


def test_wrong_bytes_are_caught_by_the_manifest_and_fetched_from_another_mirror(source, tmp_path):
    victim = shards(source)[1]
    manifest = tmp_path / "manifest.json"
    write_manifest(manifest, {p.name: FileDigest(p.stat().st_size, sha256_file(p)) for p in source.iterdir()})
    with Mirror(source, Faults(corrupt={victim})) as bad, Mirror(source) as good:
        download(options(tmp_path / "d", bad, good, manifest=str(manifest), jobs=2))
    assert_same_checkpoint(source, tmp_path / "d")


def test_wrong_bytes_from_every_mirror_fail_and_leave_no_final_file(source, tmp_path):
    victim = shards(source)[0]
    manifest = tmp_path / "manifest.json"
    write_manifest(manifest, {p.name: FileDigest(p.stat().st_size, sha256_file(p)) for p in source.iterdir()})
    with Mirror(source, Faults(corrupt={victim})) as bad:
        with pytest.raises(DownloadError, match=f"{victim}.*sha256"):
            download(options(tmp_path / "d", bad, manifest=str(manifest)))
    assert not (tmp_path / "d" / victim).exists()


def test_without_a_manifest_a_corrupt_header_is_caught(source, tmp_path):
    victim = shards(source)[2]
    with Mirror(source, Faults(corrupt={victim})) as bad:
        with pytest.raises(DownloadError, match=victim):
            download(options(tmp_path / "d", bad))
    assert not (tmp_path / "d" / victim).exists()


def test_include_fetches_a_subset(source, tmp_path):
    with Mirror(source) as m:
        download(options(tmp_path / "meta", m, include=["@meta"]))
        download(options(tmp_path / "one", m, include=["*00002-of-*"]))
    assert not list((tmp_path / "meta").glob("*.safetensors"))
    assert (tmp_path / "meta" / "config.json").is_file() and (tmp_path / "meta" / INDEX_FILE).is_file()
    assert [p.name for p in (tmp_path / "one").glob("*.safetensors")] == [shards(source)[1]]


def test_index_naming_a_file_outside_dest_is_refused(source, tmp_path):
    hostile = tmp_path / "hostile"
    hostile.mkdir()
    for p in source.iterdir():
        (hostile / p.name).write_bytes(p.read_bytes())
    index = json.loads((hostile / INDEX_FILE).read_text())
    first = next(iter(index["weight_map"]))
    index["weight_map"][first] = "../escaped.safetensors"
    (hostile / INDEX_FILE).write_text(json.dumps(index))
    with Mirror(hostile) as m, pytest.raises(Exception, match="outside the checkpoint directory"):
        download(options(tmp_path / "d", m))
    assert not (tmp_path / "escaped.safetensors").exists()


def test_a_mirror_that_always_fails_gives_a_clear_error(source, tmp_path):
    with Mirror(source, Faults(fail_500_times=10 ** 6)) as m:
        with pytest.raises(DownloadError, match="config.json.*HTTP 500"):
            download(options(tmp_path / "d", m, retries=2))


def test_missing_config_is_a_clear_error(source, tmp_path):
    with Mirror(source, Faults(missing={"config.json"})) as m:
        with pytest.raises(DownloadError, match="config.json is on none of the mirrors"):
            download(options(tmp_path / "d", m))


def test_killed_download_resumes_without_starting_over(source, tmp_path):
    dest = tmp_path / "d"
    in_progress = _interrupted(source, dest, chunks=3)
    assert in_progress, "the download should have recorded finished chunks before the kill"
    assert not any((dest / name).exists() for name in in_progress)
    cmd = [sys.executable, "-m", "k3.cli.main", "download", "--dest", str(dest), "--chunk-size", str(CHUNK),
           "--jobs", "2"]
    with Mirror(source) as fast:
        done = subprocess.run(cmd + ["--from", fast.url], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert_same_checkpoint(source, dest)
    total = sum(os.path.getsize(source / n) for n in shards(source))
    assert fast.bytes_served < total  # resumed: recorded chunks were not fetched again


def _interrupted(source, dest, chunks: int = 2):
    """`k3 download` of `source` killed once a shard has `chunks` chunks recorded -> the shards in progress."""
    with Mirror(source, Faults(bytes_per_s=400_000)) as slow:
        cmd = [sys.executable, "-m", "k3.cli.main", "download", "--dest", str(dest), "--chunk-size", str(CHUNK),
               "--jobs", "2", "--from", slow.url]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        states = dest / ".k3-download"
        deadline = time.time() + 60
        while time.time() < deadline and not any(
                len(json.loads(s.read_text())["done"]) >= chunks for s in states.glob("*.safetensors.state.json")):
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    return [s.name.removesuffix(".state.json") for s in states.glob("*.safetensors.state.json")]


def test_trunk_group_selects_shards_with_non_expert_tensors(tmp_path):
    from k3.tools.download.listing import is_trunk_shard, shards_from_index

    source = make_checkpoint(tmp_path / "src", tiny(num_experts=40), num_shards=9, seed=3)
    manifest = tmp_path / "manifest.json"
    write_manifest(manifest, {p.name: FileDigest(p.stat().st_size, sha256_file(p)) for p in source.iterdir()})
    want = {name for name, tensors in shards_from_index(source / INDEX_FILE).items() if is_trunk_shard(tensors)}
    assert 0 < len(want) < len(shards(source))  # some shards hold experts only
    for extra in ({}, {"manifest": str(manifest)}):
        dest = tmp_path / f"d{len(extra)}"
        with Mirror(source) as m:
            download(options(dest, m, include=["@trunk"], **extra))
        assert {p.name for p in dest.glob("*.safetensors")} == want


def test_without_any_sha256_a_flipped_data_byte_is_named_in_a_warning(source, tmp_path, capsys):
    from k3.cli.main import main

    victim = shards(source)[1]
    with Mirror(source, Faults(flip_data={victim})) as bad:
        assert main(["download", "--from", bad.url, "--dest", str(tmp_path / "d"), "--chunk-size", str(CHUNK)]) == 0
    err = capsys.readouterr().err
    downloaded = len(list(source.iterdir()))
    assert f"warning: {downloaded} of {downloaded} downloaded file(s) were checked by size and header only" in err
    assert "--manifest" in err


def test_a_sha256_the_mirror_advertises_catches_a_flipped_data_byte(source, tmp_path):
    victim = shards(source)[1]
    with Mirror(source, Faults(flip_data={victim}, advertise_sha256=True)) as bad, \
            Mirror(source, Faults(advertise_sha256=True)) as good:
        summary = download(options(tmp_path / "d", bad, good, jobs=2))
    assert_same_checkpoint(source, tmp_path / "d")
    assert summary.unhashed == []
    with Mirror(source, Faults(flip_data={victim}, advertise_sha256=True)) as bad:
        with pytest.raises(DownloadError, match=f"{victim}.*sha256"):
            download(options(tmp_path / "e", bad))
    assert not (tmp_path / "e" / victim).exists()


@pytest.mark.parametrize("link", [".k3-download", "sub"])
def test_a_symlinked_directory_inside_dest_never_takes_files_outside(source, tmp_path, link):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    served = tmp_path / "served"
    served.mkdir()
    for p in source.iterdir():
        (served / p.name).write_bytes(p.read_bytes())
    if link == "sub":   # the index places a shard under sub/, and dest/sub points elsewhere
        index = json.loads((served / INDEX_FILE).read_text())
        first = shards(source)[0]
        (served / "sub").mkdir()
        (served / first).rename(served / "sub" / first)
        index["weight_map"] = {k: ("sub/" + v if v == first else v) for k, v in index["weight_map"].items()}
        (served / INDEX_FILE).write_text(json.dumps(index))
    dest = tmp_path / "d"
    dest.mkdir()
    os.symlink(elsewhere, dest / link)
    with Mirror(served) as m, pytest.raises(Exception, match="outside the checkpoint directory"):
        download(options(dest, m))
    assert list(elsewhere.iterdir()) == []


def test_an_endless_body_of_unannounced_size_is_cut(source, tmp_path, monkeypatch):
    """Issue 42: a mirror answering tiktoken.model with an endless chunked body wrote 252 MiB and exited 0."""
    from k3.tools.download import http

    monkeypatch.setattr(http, "MAX_UNSIZED_BYTES", 4 << 20)
    with Mirror(source, Faults(endless={"config.json"})) as m:
        with pytest.raises(DownloadError, match="without an announced size"):
            download(options(tmp_path / "d", m, retries=1))
    written = sum(f.stat().st_size for f in (tmp_path / "d").rglob("*") if f.is_file())
    assert written < 16 << 20
    assert not (tmp_path / "d" / "config.json").exists()


@pytest.mark.parametrize("validator", [True, False], ids=["etag", "no-validator"])
def test_a_resume_after_the_mirror_swapped_the_file_never_mixes_versions(tmp_path, validator):
    """Issue 42: a resume after the file changed on the mirror gave a mix of both versions, exit 0. With an
    ETag the saved chunks are of another version and are dropped; without one there is no resume at all."""
    import shutil

    old = make_checkpoint(tmp_path / "old", tiny(), num_shards=3, seed=3)
    new = make_checkpoint(tmp_path / "new", tiny(), num_shards=3, seed=4)   # same names and sizes, other bytes
    src = tmp_path / "served"
    shutil.copytree(old, src)
    dest = tmp_path / "d"
    assert _interrupted(src, dest)
    for p in new.iterdir():
        shutil.copy(p, src / p.name)
    with Mirror(src, Faults(no_validator=not validator)) as m:
        download(options(dest, m))
    assert_same_checkpoint(new, dest)


def test_downloading_into_a_folder_that_already_holds_the_checkpoint(source, tmp_path):
    """The files were copied in (or fetched by another tool): each is checked and kept, none fetched again,
    and k3's own work folder is made when first needed (it was assumed to exist)."""
    dest = tmp_path / "copy"
    shutil.copytree(source, dest)
    with Mirror(source) as m:
        summary = download(options(dest, m))
    assert summary.to_dict()["downloaded"] == [] and len(summary.to_dict()["skipped"]) >= 1
    assert_same_checkpoint(source, dest)
