"""Native CPU kernels for decode-sized products (few rows against a large compact weight): bf16
weights x fp32 activations and packed MXFP4 x fp32, reading each weight byte once.

Built from `kernels.cpp` with torch's cpp_extension on first use (about a minute once, then cached
in torch's extension directory), with AVX2+FMA when this CPU has them (read from /proc/cpuinfo, not
assumed). Without a compiler, or with K3_NATIVE=0, `native()` is None and callers use the PyTorch
reference paths. Results equal the references up to fp32 summation order.
"""

from __future__ import annotations

import functools
import hashlib
import os
import warnings
from pathlib import Path

SOURCE = Path(__file__).with_name("kernels.cpp")
MAX_ROWS = 32  # measured: above ~32-48 rows, dequantise-then-GEMM (compute bound) wins


def cpu_flags() -> set[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


@functools.lru_cache(maxsize=1)
def native():
    """The compiled module, or None (disabled, or the build failed: a warning says why)."""
    if os.environ.get("K3_NATIVE") == "0":
        return None
    try:
        from torch.utils.cpp_extension import load_inline

        simd = ["-mavx2", "-mfma"] if {"avx2", "fma"} <= cpu_flags() else []
        source = SOURCE.read_text()
        tag = hashlib.sha256((source + " ".join(simd)).encode()).hexdigest()[:12]
        return load_inline(name=f"k3_native_{tag}", cpp_sources=[source], functions=["bf16_linear", "mxfp4_linear", "mxfp4_glu_expert"],
                           extra_cflags=["-O3", "-fopenmp", *simd], extra_ldflags=["-fopenmp"], verbose=False)
    except Exception as e:  # no compiler, no ninja, ...: fall back, loudly
        warnings.warn(f"k3 native CPU kernels unavailable ({type(e).__name__}: {e}); using PyTorch paths",
                      stacklevel=2)
        return None
