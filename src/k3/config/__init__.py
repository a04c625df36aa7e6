"""Model configuration: typed K3Config, the HF config.json mapping, and named presets (stdlib only)."""

from k3.config.hf import from_hf_dict, load_config, to_hf_dict
from k3.config.model import ConfigError, K3Config
from k3.config.presets import PRESETS, released, tiny

__all__ = ["ConfigError", "K3Config", "PRESETS", "from_hf_dict", "load_config", "released", "tiny", "to_hf_dict"]
