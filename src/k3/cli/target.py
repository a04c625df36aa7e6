"""Resolve a CLI target: a checkpoint directory, a config.json file, or a preset name."""

from __future__ import annotations

from pathlib import Path

from k3.config import PRESETS, K3Config, load_config


def resolve_config(target: str) -> tuple[K3Config, Path | None, str]:
    """-> (config, checkpoint directory or None, display name)."""
    p = Path(target)
    if p.exists():
        return load_config(p), (p if p.is_dir() else None), str(p)
    if target in PRESETS:
        return PRESETS[target](), None, f"preset '{target}'" + (" (Kimi K3 as released)" if target == "k3" else "")
    raise FileNotFoundError(f"{target!r} is neither a checkpoint directory, a config.json, nor a preset "
                            f"({', '.join(PRESETS)})")
