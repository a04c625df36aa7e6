"""Native CPU kernels for decode-sized work: compact weights (bf16, packed MXFP4) times a few fp32 rows,
reading each weight byte once, KDA's whole one-token step after the projections, and AttnRes mixes.

Built from the `.cpp` files here with torch's cpp_extension on first use (about a minute once, then
cached in torch's extension directory), with AVX2+FMA when this CPU has them; the MXFP4 product also
has an AVX-512 form, used when the CPU lists avx512f/bw/vl. Features are read from /proc/cpuinfo,
never assumed. Without a compiler, or with K3_NATIVE=0, `native()` is None and callers use the
PyTorch reference paths. K3_NATIVE_SIMD=scalar|avx2|avx512 caps the instruction set. Results equal
the references up to fp32 summation order, except the opt-in int8-activation MXFP4 path (bounded error).
"""

from __future__ import annotations

import functools
import hashlib
import os
import warnings
from pathlib import Path

SOURCES = ("common.cpp", "bf16.cpp", "int8.cpp", "mxfp4.cpp", "kda.cpp", "attnres.cpp")  # joined in this order
FUNCTIONS = ["set_simd", "set_int8_activations", "bf16_linear", "bf16_head_linear", "mxfp4_linear",
             "mxfp4_glu_expert", "mxfp4_moe_token", "mxfp4_dequantize", "kda_decode", "attn_res_mix"]
MAX_ROWS = 32  # measured: above ~32-48 rows, dequantise-then-GEMM (compute bound) wins
SIMD_LEVELS = {"scalar": 0, "avx2": 1, "avx512": 2}


def cpu_flags() -> set[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def cpu_simd_level(flags: set[str]) -> int:
    """The widest instruction set the kernels have and this CPU supports (see SIMD_LEVELS)."""
    if not {"avx2", "fma"} <= flags:
        return 0
    return 2 if {"avx512f", "avx512bw", "avx512vl"} <= flags else 1


def simd_level() -> int:
    """What the kernels run with: the CPU's level, capped by K3_NATIVE_SIMD when set."""
    level = cpu_simd_level(cpu_flags())
    cap = os.environ.get("K3_NATIVE_SIMD")
    if cap:
        if cap not in SIMD_LEVELS:
            raise ValueError(f"K3_NATIVE_SIMD={cap!r}: expected one of {', '.join(SIMD_LEVELS)}")
        level = min(level, SIMD_LEVELS[cap])
    return level


def cpu_inference(*tensors) -> bool:
    """The kernels are built and every tensor is on the CPU and outside autograd (the kernels' results
    carry no gradient, so training keeps the PyTorch paths). Callers add their dtype and size checks."""
    import torch

    return (all(t.device.type == "cpu" for t in tensors)
            and not (torch.is_grad_enabled() and any(t.requires_grad for t in tensors))
            and native() is not None)


@functools.lru_cache(maxsize=1)
def native():
    """The compiled module, or None (disabled, or the build failed: a warning says why)."""
    if os.environ.get("K3_NATIVE") == "0":
        return None
    try:
        from torch.utils.cpp_extension import load_inline

        level = simd_level()
        simd = ["-mavx2", "-mfma"] if level >= 1 else []
        source = "\n".join((Path(__file__).with_name(name)).read_text() for name in SOURCES)
        tag = hashlib.sha256((source + " ".join(simd)).encode()).hexdigest()[:12]
        module = load_inline(name=f"k3_native_{tag}", cpp_sources=[source], functions=FUNCTIONS,
                             extra_cflags=["-O3", "-ffp-contract=off", "-fopenmp", *simd], extra_ldflags=["-fopenmp"], verbose=False)
        module.set_simd(level)
        module.set_int8_activations(os.environ.get("K3_MXFP4_INT8") == "1")
        return module
    except Exception as e:  # no compiler, no ninja, ...: fall back, loudly
        warnings.warn(f"k3 native CPU kernels unavailable ({type(e).__name__}: {e}); using PyTorch paths",
                      stacklevel=2)
        return None


def set_int8_activations(on: bool) -> bool:
    """Opt in (or out) to int8 activations in the decode-sized MXFP4 products (AVX2 CPUs): each group of
    32 activations is rounded to int8 with its own scale and multiplied by the codes as integers.
    Faster; the error per output is bounded (see int8.cpp; tested). K3_MXFP4_INT8=1 turns it on at
    load. Returns the previous setting; False when the native kernels are unavailable."""
    kernels = native()
    return False if kernels is None else kernels.set_int8_activations(bool(on))
