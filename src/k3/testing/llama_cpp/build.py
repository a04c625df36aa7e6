"""Build llama.cpp, the CPU engine K3 users run, from the source PyPI ships, into a cache directory.

The `llama-cpp-python` sdist vendors a llama.cpp with Kimi-K3 support (model graph, and a converter
that repacks compressed-tensors MXFP4 experts into ggml's MXFP4). One pinned version is fetched with
pip (a package registry, not a model hub), unpacked, and built with cmake + ninja for this CPU
(GGML_NATIVE): `libllama` (for the logits oracle) and `llama-bench` (for the speed anchor), and on request
`llama-server` (for runs against a server nobody here wrote; benchmarks/foreign_server.py), without its
web UI (whose assets would be downloaded). Minutes once; later calls find the build and return at once.

K3_NATIVE_SIMD=avx2, which caps k3's kernels at AVX2, caps llama.cpp too: a second build (`build-avx2`)
with the instruction sets of an AVX2-only CPU such as Zen 3 (AVX, AVX2, FMA, F16C, BMI2; no AVX-512, no
VNNI, no AMX), so both engines run an AVX2 machine's code paths on a newer CPU, side by side.

    python -m k3.testing.llama_cpp build          # or: make llama-cpp
    python -m k3.testing.llama_cpp build --server # llama-server too
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from k3.config import env

VERSION = "0.3.36"  # the first llama-cpp-python whose vendored llama.cpp has the kimi-k3 arch
TARGETS = ("llama", "llama-bench")
SERVER = "llama-server"


class AnchorError(RuntimeError):
    """llama.cpp could not be fetched, built or run; the message says which step and how to fix it."""


def cache_dir() -> Path:
    """$K3_LLAMA_CPP_DIR, else ~/.cache/k3/llama.cpp-<version> (XDG_CACHE_HOME respected)."""
    return env.folder("K3_LLAMA_CPP_DIR", f"llama.cpp-{VERSION}")


def source_dir(root: Path | None = None) -> Path:
    """The unpacked sdist: its `llama_cpp/` bindings and `vendor/llama.cpp/`."""
    return (root or cache_dir()) / "src"


def llama_dir(root: Path | None = None) -> Path:
    return source_dir(root) / "vendor" / "llama.cpp"


# What an AVX2-only CPU's GGML_NATIVE build enables (Zen 3: no AVX-512, no AVX-VNNI), named explicitly.
AVX2_FLAGS = ("-DGGML_NATIVE=OFF", "-DGGML_AVX=ON", "-DGGML_AVX2=ON", "-DGGML_FMA=ON", "-DGGML_F16C=ON", "-DGGML_BMI2=ON",
              "-DGGML_AVX512=OFF", "-DGGML_AVX_VNNI=OFF", "-DGGML_AMX_TILE=OFF", "-DGGML_AMX_INT8=OFF",
              "-DGGML_AMX_BF16=OFF")


def simd_cap() -> str | None:
    """"avx2" when k3's kernels are capped at AVX2 (K3_NATIVE_SIMD=avx2), so llama.cpp is built likewise;
    None otherwise (a scalar cap has no llama.cpp counterpart: the native build stands)."""
    return "avx2" if env.read("K3_NATIVE_SIMD") == "avx2" else None


def build_dir(root: Path | None = None) -> Path:
    return (root or cache_dir()) / ("build-avx2" if simd_cap() == "avx2" else "build")


def cmake_flags() -> list[str]:
    """The instruction-set flags: this CPU's own, or an AVX2-only CPU's under the cap."""
    return list(AVX2_FLAGS) if simd_cap() == "avx2" else ["-DGGML_NATIVE=ON"]


def bin_dir(root: Path | None = None) -> Path:
    return build_dir(root) / "bin"


def is_built(root: Path | None = None, server: bool = False) -> bool:
    b = bin_dir(root)
    return (b / "llama-bench").is_file() and (b / "libllama.so").exists() and (not server or (b / SERVER).is_file())


def build(root: Path | None = None, jobs: int | None = None, log=print, server: bool = False) -> Path:
    """Fetch, unpack and build (each step skipped when done); `server`: llama-server too. Returns the cache
    directory."""
    root = root or cache_dir()
    if is_built(root, server):
        return root
    for tool in ("cmake", "ninja", "c++"):
        if shutil.which(tool) is None:
            raise AnchorError(f"building llama.cpp needs `{tool}` on PATH (Debian: apt-get install cmake ninja-build g++)")
    root.mkdir(parents=True, exist_ok=True)
    if not (llama_dir(root) / "CMakeLists.txt").is_file():
        _fetch(root, log)
    out = build_dir(root)
    _run(["cmake", "-S", str(llama_dir(root)), "-B", str(out), "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
          *cmake_flags(), "-DBUILD_SHARED_LIBS=ON", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
          f"-DLLAMA_BUILD_SERVER={'ON' if server else 'OFF'}", "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF",
          "-DLLAMA_BUILD_APP=OFF", "-DLLAMA_OPENSSL=OFF", "-DLLAMA_BUILD_TOOLS=ON"],
         "configure llama.cpp", log)
    targets = (*TARGETS, SERVER) if server else TARGETS
    cmd = ["cmake", "--build", str(out), "--target", *targets, "-j", str(jobs or os.cpu_count() or 2)]
    _run_with_progress(cmd, log)
    if not is_built(root, server):
        raise AnchorError(f"llama.cpp built without {', '.join(targets)} in {bin_dir(root)}; see the log above")
    return root


def _fetch(root: Path, log) -> None:
    log(f"llama.cpp: fetching llama-cpp-python=={VERSION} (source) with pip")
    with tempfile.TemporaryDirectory(dir=root) as tmp:
        _run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
              f"llama-cpp-python=={VERSION}", "-d", tmp], "pip download llama-cpp-python", log)
        archives = list(Path(tmp).glob("llama_cpp_python-*.tar.gz"))
        if not archives:
            raise AnchorError(f"pip left no llama_cpp_python sdist in {tmp}")
        with tarfile.open(archives[0]) as tar:
            tar.extractall(tmp, filter="data")
        unpacked = Path(tmp) / f"llama_cpp_python-{VERSION}"
        shutil.rmtree(source_dir(root), ignore_errors=True)
        unpacked.rename(source_dir(root))  # whole or not at all: a cut download leaves no half tree


def _run(cmd: list[str], what: str, log) -> None:
    log(f"llama.cpp: {what}")
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise AnchorError(f"{what} failed (exit {out.returncode}):\n{(out.stdout + out.stderr)[-3000:]}")


def _run_with_progress(cmd: list[str], log) -> None:
    """ninja prints `[n/N] ...`; a line about every 10 % (the build is long and CI logs are not terminals)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    tail: list[str] = []
    shown = -1
    for line in proc.stdout:
        tail = (tail + [line])[-40:]
        m = re.match(r"\[(\d+)/(\d+)\]", line)
        if m:
            done, total = int(m.group(1)), int(m.group(2))
            tenth = done * 10 // total
            if tenth > shown:
                shown = tenth
                log(f"llama.cpp: building {done}/{total} ({100 * done // total} %)")
    if proc.wait() != 0:
        raise AnchorError(f"building llama.cpp failed (exit {proc.returncode}):\n{''.join(tail)}")
