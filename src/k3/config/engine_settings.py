"""The engine settings that are command-line flags: each one's default and help, written once.

`k3.EngineConfig` (engine/config.py) takes its fields' defaults from here, and `k3/cli/engine_args.py` makes
each entry a flag under its kebab-case name (vLLM's names) with this help. Torch-free, so `k3 --help` and
the parsers stay instant."""

from __future__ import annotations

from dataclasses import dataclass

GiB = 2 ** 30
DTYPES = ("float32", "bfloat16", "float16", "float64")
VISION_DTYPES = ("float32", "bfloat16")


@dataclass(frozen=True)
class Setting:
    default: object
    help: str
    metavar: str | None = None           # SIZE (bytes, "1GiB" or "24GB"), DIR, JSON, N (an integer)
    choices: tuple[str, ...] | None = None

    @property
    def is_int(self) -> bool:
        return self.metavar == "N"


SETTINGS: dict[str, Setting] = {
    # How the model loads
    "dtype": Setting(None, "compute dtype (auto: fp32 on a CPU, weights kept as stored)", choices=("auto", *DTYPES)),
    "device": Setting("cpu", "torch device for the model and its state (e.g. cuda)"),
    "memory_budget": Setting(None, "weights + cache within this (e.g. 64GB); experts, then layers, that do not fit "
                             "stream from the shards (see k3 plan)", "SIZE"),
    "vision": Setting(True, "load the checkpoint's vision tower (--no-vision: the text model alone; the tower is not "
                      "read and images are refused)"),
    "vision_dtype": Setting("float32", "the vision tower's compute: float32 (exact against the reference) or bfloat16 "
                            "(faster where the CPU has AMX or AVX512_BF16; about 1e-2 relative from float32)",
                            choices=VISION_DTYPES),
    # The engine
    "max_num_seqs": Setting(8, "sequences decoded together", "N"),
    "max_num_batched_tokens": Setting(512, "tokens per engine step; longer prompts prefill in chunks", "N"),
    "cache_memory": Setting(GiB, "KDA slots + the MLA latent cache", "SIZE"),
    "block_size": Setting(16, "tokens per MLA cache block", "N"),
    "max_resident_seqs": Setting(None, "sequences whose state stays in memory; the others' waits on disk for their "
                                 "turn (default: as many as --cache-memory holds)", "N"),
    "state_offload_dir": Setting(None, "where waiting sequences' state goes (default: a private temporary folder)",
                                 "DIR"),
    "max_model_len": Setting(None, "prompt + completion tokens per request (default: what the cache holds for one "
                             "sequence; k3 serve: at most 131,072)", "N"),
    "enable_prefix_caching": Setting(True, "reuse the state of earlier prompts' prefixes (exact)"),
    "prefix_cache_memory": Setting(None, "part of --cache-memory kept for KDA snapshots (default a quarter; 0 keeps "
                                   "none)", "SIZE"),
    "prefix_cache_spill_dir": Setting(None, "write snapshots evicted from memory here, to resume from later (off by "
                                      "default)", "DIR"),
    "prefix_cache_spill_bytes": Setting(16 * GiB, "disk the spilled snapshots may take", "SIZE"),
    "speculative_config": Setting(None, 'speculative decoding, vLLM\'s JSON: {"method": "ngram", '
                                  '"num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2} or '
                                  '{"method": "draft_model", "model": "PATH", "num_speculative_tokens": 4} (off by '
                                  'default)', "JSON"),
}
