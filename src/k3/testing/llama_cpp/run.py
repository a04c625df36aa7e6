"""Run the built llama.cpp: `llama-bench` for speed, the vendored Python bindings for logits."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from k3.testing.llama_cpp.build import AnchorError, bin_dir, is_built, source_dir


def _require_built(root: Path | None) -> None:
    if not is_built(root):
        raise AnchorError("llama.cpp is not built: run `make llama-cpp` (minutes, once)")


def bench(gguf: str | Path, *, threads: int, prompt: int = 0, generate: int = 0, depth: int = 0,
          repetitions: int = 1, repack: bool = True, root: Path | None = None) -> dict:
    """One llama-bench test: prompt tokens/s (pp, one batch of `prompt`) or generation tokens/s
    (tg, `generate` tokens one at a time after `depth` tokens in the cache). Returns its JSON row
    (avg_ts, stddev_ts, samples_ts, ...). mmap on, as llama.cpp runs by default; repack (its default)
    lets llama.cpp repack weights into its extra buffer types."""
    _require_built(root)
    cmd = [str(bin_dir(root) / "llama-bench"), "-m", str(gguf), "-t", str(threads), "-p", str(prompt),
           "-n", str(generate), "-d", str(depth), "-r", str(repetitions), "-b", str(max(prompt, 512)),
           "-ub", str(max(prompt, 512)), "--repack", str(int(repack)), "-o", "json"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if out.returncode != 0:
        raise AnchorError(f"llama-bench failed (exit {out.returncode}):\n{out.stderr[-3000:]}")
    rows = json.loads(out.stdout)
    if len(rows) != 1:
        raise AnchorError(f"llama-bench printed {len(rows)} results, expected one:\n{out.stdout[-2000:]}")
    return rows[0]


def bindings(root: Path | None = None):
    """The `llama_cpp` module from the same sdist, loading the library built here."""
    _require_built(root)
    os.environ["LLAMA_CPP_LIB_PATH"] = str(bin_dir(root))
    src = str(source_dir(root))
    if src not in sys.path:
        sys.path.insert(0, src)
    import llama_cpp

    return llama_cpp


def logits(gguf: str | Path, ids: list[int], *, threads: int = 2, root: Path | None = None) -> np.ndarray:
    """ids [T] -> logits [T, vocab] (fp32) from one llama.cpp forward over the whole prompt. The KV cache
    is fp32 too (llama.cpp's default f16 would round MLA's latents)."""
    llama_cpp = bindings(root)
    n = max(64, len(ids))
    model = llama_cpp.Llama(model_path=str(gguf), n_ctx=n, n_batch=n, n_ubatch=n, n_threads=threads,
                            logits_all=True, type_k=llama_cpp.GGML_TYPE_F32, type_v=llama_cpp.GGML_TYPE_F32,
                            verbose=False)
    try:
        model.eval(ids)
        return np.array(model.scores[:len(ids)], dtype=np.float32)
    finally:
        model.close()
