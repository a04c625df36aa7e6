"""`python -m k3.ops.native`: build the CPU kernels ahead of time, and measure this CPU's decode GEMV forms
(tuning.py) once, where nothing has yet (make and CI run it after installing)."""

import sys

from k3.ops.native import cache_root, decode_gemv, native, tuning

if native() is None:
    sys.exit("k3: the native CPU kernels could not be built (see the warning above); k3 runs on PyTorch paths")
print(f"k3: CPU kernels ready in {cache_root()} (decode GEMVs: {tuning.describe(decode_gemv())})")
