"""Building the native module: one translation unit per `.cpp` here, compiled by torch's cpp_extension
(ninja) into a build directory kept per flag set and checkout, so an edit recompiles only the units it
touches (a header edit, every unit including it: ninja reads the compiler's dependency files). The linked
library is then copied into a directory named by everything it depends on (the sources and headers, the
flags, torch, Python and the compiler), from which later processes import it without building.

Two processes building at once (two virtualenvs, a user and CI) take turns on a build directory under an
OS file lock, which the kernel releases if a builder dies, so a killed build never leaves the next one
waiting; the published copy appears by one rename, whole or not at all.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import importlib.machinery
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

HERE = Path(__file__).resolve().parent
NAME = "k3_native"


def units(directory: Path = HERE) -> list[Path]:
    """The translation units: every `.cpp` in the directory (bindings.cpp registers them for Python)."""
    return sorted(directory.glob("*.cpp"))


def sources_digest(directory: Path = HERE) -> str:
    """Every unit's and header's name and text, hashed: what the compiled code is made of."""
    h = hashlib.sha256()
    for path in sorted([*directory.glob("*.cpp"), *directory.glob("*.h")]):
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


@functools.lru_cache(maxsize=1)
def _compiler() -> str:
    cxx = os.environ.get("CXX", "c++")
    try:
        return subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=30).stdout.split("\n")[0]
    except (OSError, subprocess.SubprocessError):
        return f"{cxx} (version unknown)"


def build_key(what: str, flags: list[str]) -> str:
    """`what` (the sources' digest, or a checkout's path) with everything else the built library depends on:
    the flags, torch's version, the Python ABI and the compiler. A change to any of them is another build."""
    import torch

    parts = [what, " ".join(flags), torch.__version__, sys.implementation.cache_tag,
             sysconfig.get_config_var("EXT_SUFFIX") or "", _compiler()]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def import_from(directory: Path, name: str = NAME):
    """The extension module `name` from `directory/name.so`."""
    path = directory / f"{name}.so"
    loader = importlib.machinery.ExtensionFileLoader(name, str(path))
    spec = importlib.util.spec_from_file_location(name, path, loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


@contextmanager
def _exclusive(lock_path: Path):
    """Hold an OS lock on `lock_path` (waiting for it): released by the kernel when this process ends."""
    with open(lock_path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _publish(library: Path, final: Path, name: str) -> None:
    """Copy the linked library to `final/name.so` through a private directory and one rename (a racing
    publisher of the same key wrote the same build: the first rename stands)."""
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=final.parent))
    try:
        shutil.copy2(library, tmp / f"{name}.so")
        os.rename(tmp, final)
    except OSError:
        pass
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def build(name: str, sources: list[Path], flags: list[str], build_dir: Path, final: Path, include: Path = HERE):
    """Compile `sources` (only what changed since the last build in `build_dir`), link, import the module
    and publish the library under `final`. Returns the imported module."""
    from torch.utils.cpp_extension import load

    build_dir.mkdir(parents=True, exist_ok=True)
    print(f"k3: building k3's CPU kernels ({len(sources)} units), once: a few minutes on 2 cores (in {build_dir})",
          file=sys.stderr, flush=True)
    start = time.monotonic()
    with _exclusive(build_dir / "k3-build.lock"), _heartbeat(build_dir, len(sources)):
        if (final / f"{name}.so").is_file():   # the builder we waited for made this very build
            return import_from(final, name)
        # Under our lock nobody else builds here: a torch "lock" file is one a killed build left behind,
        # on which torch would wait forever.
        (build_dir / "lock").unlink(missing_ok=True)
        # The linker would rewrite the library in place, under any process that has it loaded: unlink it
        # first, so the new one is a new file.
        (build_dir / f"{name}.so").unlink(missing_ok=True)
        module = load(name=name, sources=[str(s) for s in sources], extra_cflags=flags, extra_ldflags=["-fopenmp"],
                      extra_include_paths=[str(include)], build_directory=str(build_dir), verbose=False)
        library = Path(module.__file__)
        if library.stem == name:   # torch renames a second, different build in one process: not publishable
            _publish(library, final, name)
    print(f"k3: CPU kernels built in {time.monotonic() - start:.0f} s", file=sys.stderr, flush=True)
    return module


HEARTBEAT_S = 30.0


@contextmanager
def _heartbeat(build_dir: Path, units: int):
    """While the compiler runs (torch's build prints nothing), a line every HEARTBEAT_S: the time so far and
    the units compiled (object files new or rewritten since the build began)."""
    import threading

    def objects() -> dict[str, int]:
        found = {}
        for o in build_dir.glob("*.o"):
            try:
                found[o.name] = o.stat().st_mtime_ns
            except OSError:
                pass    # replaced by the compiler as we looked
        return found

    stop, start, before = threading.Event(), time.monotonic(), objects()

    def beat() -> None:
        while not stop.wait(HEARTBEAT_S):
            done = sum(1 for name, written in objects().items() if before.get(name) != written)
            print(f"k3: still building the CPU kernels: {time.monotonic() - start:.0f} s, {done} of {units} units "
                  "compiled", file=sys.stderr, flush=True)

    thread = threading.Thread(target=beat, name="k3-build-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def load_or_build(flags: list[str], cache: Path):
    """The module for these flags: imported from the cache when this exact build was published, else built."""
    final = cache / f"{NAME}_{build_key(sources_digest(), flags)}"
    if (final / f"{NAME}.so").is_file():
        return import_from(final)
    cache.mkdir(parents=True, exist_ok=True)
    build_dir = cache / f"build-{build_key(str(HERE), flags)}"
    return build(NAME, units(), flags, build_dir, final)
