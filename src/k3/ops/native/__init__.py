"""Native CPU kernels for decode-sized work: compact weights (bf16, int8, packed MXFP4) times a few fp32 rows,
reading each weight byte once; KDA's whole one-token step on the state slots; MLA decode over the paged
cache in place; AttnRes mixes.

Built from the `.cpp` files here, one translation unit each, with torch's cpp_extension (build.py:
incremental, under a file lock, published by one rename) into K3_NATIVE_CACHE (default
~/.cache/k3/native). `python -m k3.ops.native` builds ahead of time (make and CI do). Features are read
from /proc/cpuinfo, never assumed: AVX2+FMA code when the CPU has them, AVX-512 forms when it lists
avx512f/bw/vl. Without a compiler, or with K3_NATIVE=0, `native()` is None
and every op runs its PyTorch reference (`k3.ops.dispatch` decides per call). K3_NATIVE_SIMD=scalar|avx2|avx512
caps the instruction set. Results equal the references up to fp32 summation order, except the opt-in
int8-activation MXFP4 path (bounded error). Prefill-sized products run a native blocked GEMM
(gemm.cpp) where `prefill_gemm()` says so.
"""

from __future__ import annotations

import types
import warnings
from pathlib import Path

from k3.config import cpuinfo, env
from k3.config.once import once
from k3.ops.native import build, tuning

# Hidden visibility: the units' shared settings (k3.h's inline variables) are read directly, not through
# the dynamic linker's table; only the module's init function is exported. -Wno-psabi: the AVX-512 forms
# pass 16-lane vectors between inlined helpers, never across an ABI boundary.
CFLAGS = ["-O3", "-ffp-contract=off", "-fopenmp", "-fvisibility=hidden", "-Wno-psabi"]
MAX_ROWS = 32  # above this, dequantise-then-GEMM (compute bound) wins: the weight is reused across rows
SIMD_LEVELS = {"scalar": 0, "avx2": 1, "avx512": 2}


def cpu_flags() -> set[str]:
    return set(cpuinfo.field("flags").split())


def cpu_vendor() -> str:
    """"AuthenticAMD", "GenuineIntel", ... ("" when unknown)."""
    return cpuinfo.field("vendor_id")


def cpu_simd_level(flags: set[str]) -> int:
    """The widest instruction set the kernels have and this CPU supports (see SIMD_LEVELS)."""
    if not {"avx2", "fma"} <= flags:
        return 0
    return 2 if {"avx512f", "avx512bw", "avx512vl"} <= flags else 1


def simd_level() -> int:
    """What the kernels run with: the CPU's level, capped by K3_NATIVE_SIMD when set."""
    level = cpu_simd_level(cpu_flags())
    cap = env.read("K3_NATIVE_SIMD")
    if cap:
        level = min(level, SIMD_LEVELS[cap])
    return level


def _choice(variable: str, default: str) -> str:
    return env.read(variable) or default


def bf16_dot_units() -> bool:
    """Whether the CPU has AVX512_BF16's dot-product instruction (vdpbf16ps) at the AVX-512 level k3 runs."""
    return simd_level() >= 2 and "avx512_bf16" in cpu_flags()


@once
def prefill_gemm() -> str:
    """Who multiplies prefill-sized products (more than MAX_ROWS rows): "native" (gemm.cpp, widening or
    decoding the weight as it packs it), "torch" (the weight widened or decoded to fp32, then MKL), or
    "bf16-dot" (gemm_dot.cpp: the activations rounded to bf16, the products on the CPU's bf16 dot-product
    units where it has them: an opt-in, since it rounds; docs/design/precision.md). K3_PREFILL_GEMM chooses. The default is native wherever the kernels have vector code: on AMD CPUs MKL
    takes its AVX2 code, and on Intel's AVX-512, where MKL runs its own AVX-512 code, a whole prefill was
    still faster native (the fp32 copy of every weight costs more than MKL's tile saves). Every row's
    result is then independent of its batch. Measured: docs/benchmarks/results.md (prefill_gemm)."""
    return _choice("K3_PREFILL_GEMM", "native" if simd_level() >= 1 else "torch")


def _amd_avx512() -> bool:
    """Where the decode memory-access choices below were measured to pay: AMD with AVX-512."""
    return cpu_vendor() == "AuthenticAMD" and simd_level() == 2


def _gemv_rule() -> int:
    """decode_gemv where no measurement decides (the forms tie, or the scalar level): every row sequential on
    AMD CPUs with AVX-512, where it read the weights faster, tiles elsewhere."""
    return tuning.ALWAYS if _amd_avx512() else 0


def _gemv_bytes(kernels) -> int:
    """K3_DECODE_GEMV, else the row length measured on this CPU (tuning.py), else the rule."""
    chosen = env.read("K3_DECODE_GEMV")
    if chosen or kernels is None:
        return tuning.FORMS[chosen] if chosen else _gemv_rule()
    return tuning.sequential_row_bytes(kernels, _gemv_rule(), cache_root() / "tuning.json", simd_level(),
                                       weight_prefetch())


@once
def decode_gemv() -> int:
    """How the decode GEMVs (bf16, and int8 trunks) read a weight for a lone row of activations (batch-1
    decode), as the longest row in bytes they read "sequentially" (each thread reads its share of the rows
    in order as two streams, from the start and the middle of its share, each prefetched 2 KB ahead);
    longer rows go in "tiles" (eight rows at a time with AVX-512, four with AVX2, each prefetched, the next
    tile into L2). 0: tiles for every weight; tuning.ALWAYS: sequential for every weight. Every output's sum
    is the same either way. K3_DECODE_GEMV=tiles|sequential sets one form for every weight; by default the
    forms are measured against each other on this CPU once, at several row lengths (tuning.py), since which
    is faster followed neither vendor nor instruction set: on an Intel Ice Lake sequential read rows of up
    to 4 KB faster and tiles longer ones. Figures: docs/benchmarks/results.md (decode_settings.py measures
    the default against each form)."""
    return _gemv_bytes(native())


@once
def weight_prefetch() -> str:
    """The cache hint of the decode products' software prefetches of their weights: "nta" (non-temporal:
    the weights, read once a token, displace less of what is read again) or "t0" (into every level).
    Results do not depend on it. K3_WEIGHT_PREFETCH chooses. The default is nta on AMD CPUs with AVX-512,
    where it made a decode token faster in every alternating pair, and t0 elsewhere: on Intel's AVX-512 t0
    was the faster (decode_settings.py; docs/benchmarks/results.md)."""
    return _choice("K3_WEIGHT_PREFETCH", "nta" if _amd_avx512() else "t0")


def cache_root() -> Path:
    return env.folder("K3_NATIVE_CACHE", "native")


def _kernels(module):
    """One handle on what the build holds: the pybind11 module's decode plan and settings, and each kernel as
    its torch operator (torch.ops.k3.NAME.default, registered with its schema and its fake kernel: fake.py)."""
    import torch

    from k3.ops.native import fake

    names = {name: getattr(module, name) for name in dir(module) if not name.startswith("_")}
    names.update({name: getattr(torch.ops.k3, name).default for name in module.operator_names()})
    fake.register()  # their meta kernels, for meta tensors, FakeTensorMode and torch.compile
    return types.SimpleNamespace(**names)


@once
def native():
    """The kernels (see _kernels), or None (disabled, or the build failed: a warning says why)."""
    if not env.switch("K3_NATIVE", True):
        return None
    try:
        level = simd_level()
        flags = CFLAGS + (["-mavx2", "-mfma"] if level >= 1 else [])
        kernels = _kernels(build.load_or_build(flags, cache_root()))
        kernels.set_simd(level)
        kernels.set_prefetch_nta(weight_prefetch() == "nta")   # before the GEMV forms are measured under it
        kernels.set_gemv_sequential_bytes(_gemv_bytes(kernels))
        kernels.set_int8_activations(env.switch("K3_MXFP4_INT8", False))
        kernels.set_bf16_dot(bf16_dot_units())
        return kernels
    except Exception as e:  # no compiler, no ninja, ...: fall back, loudly
        warnings.warn(f"k3 native CPU kernels unavailable ({type(e).__name__}: {e}); using PyTorch paths",
                      stacklevel=2)
        return None


def set_int8_activations(on: bool) -> bool:
    """Opt in (or out) to int8 activations in the decode-sized MXFP4 products (AVX2 CPUs): each group of
    32 activations is rounded to int8 with its own scale and multiplied by the codes as integers.
    Faster; the error per output is bounded (see mxfp4_int8.h; tested). K3_MXFP4_INT8=1 turns it on at
    load. Returns the previous setting; False when the native kernels are unavailable."""
    kernels = native()
    return False if kernels is None else kernels.set_int8_activations(bool(on))
