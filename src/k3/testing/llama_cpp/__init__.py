"""llama.cpp as an outside anchor: a speed baseline (`benchmarks/compare.py`) and a third logits oracle.

    build()                      fetch + build once into cache_dir() (python -m k3.testing.llama_cpp build)
    convert(ckpt, out, outtype)  official-layout checkpoint -> GGUF with llama.cpp's own converter
    bench(gguf, threads=...)     one llama-bench row
    logits(gguf, ids)            [T, vocab] fp32 through the vendored Python bindings
"""

from k3.testing.llama_cpp.build import VERSION, AnchorError, build, cache_dir, is_built
from k3.testing.llama_cpp.convert import convert
from k3.testing.llama_cpp.run import bench, logits

__all__ = ["VERSION", "AnchorError", "bench", "build", "cache_dir", "convert", "is_built", "logits"]
