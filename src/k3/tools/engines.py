"""What other engines need to load the released K3 checkpoint (from ../shared/CONTEXT.md, as of 2026-09).

Kept as data so `k3 doctor` can print it; update a row when an engine's support changes.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EngineSupport:
    engine: str
    loads_official_mxfp4: str  # "yes", "convert", "no"
    hardware: str
    needs: str
    ref: str


ENGINES = (
    EngineSupport("vLLM", "yes", "8+ Blackwell (native MXFP4); H200 via Marlin W4A16; MI355X",
                  "all weights in GPU memory (TP8/TP16); v0.27+ or the kimi-k3 image", "vllm#50000"),
    EngineSupport("SGLang", "yes", "2x8 H200, B300, GB300", "all weights in GPU memory; v0.5.17+",
                  "sgl#32541"),
    EngineSupport("TensorRT-LLM", "yes", "Blackwell only (GB300 NVL)", "build from source; all weights in GPU memory",
                  "trt#17269"),
    EngineSupport("llama.cpp", "convert", "CPU, CUDA, Metal, Vulkan, hybrid",
                  "GGUF conversion (MXFP4_MOE repack); experts in RAM (768 GB-1.5 TB reported)", "lcpp#26185"),
    EngineSupport("MLX-LM", "yes", "Apple Silicon (2x M3 Ultra tested)", "~768 GB resident; no expert streaming",
                  "mlxlm#1626"),
    EngineSupport("colibri", "yes", "x86 CPU (AVX2) + NVMe, 32 GB+ RAM", "streams MXFP4 experts from the shards",
                  "colibri#695"),
    EngineSupport("kimi-k3-in-c", "yes", "Linux CPU + NVMe", "streams experts (O_DIRECT); BF16 trunk in RAM",
                  "kic docs/PERFORMANCE.md"),
    EngineSupport("HF transformers", "yes", "GPU (remote code needs fla kernels)",
                  "trust_remote_code; full residency", "hf#47670"),
    EngineSupport("ktransformers", "no", "-", "no K3 support (request open)", "kt#2109"),
)


def engine_rows() -> list[dict]:
    return [e.__dict__ for e in ENGINES]
