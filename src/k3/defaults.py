"""The trained default model that ships with k3 (a small K3-architecture model trained on English prose)."""

from __future__ import annotations

from pathlib import Path

DEFAULT_MODEL_DIR = Path(__file__).parent / "data" / "default-model"


def default_model() -> Path:
    """Path of the bundled default model; raises with the fix when it is missing."""
    if not (DEFAULT_MODEL_DIR / "config.json").is_file():
        raise FileNotFoundError(f"the default model is missing from {DEFAULT_MODEL_DIR}; rebuild it with "
                                "`make data model`, or pass --model PATH")
    return DEFAULT_MODEL_DIR


DEFAULT_DRAFTER_DIR = Path(__file__).parent / "data" / "default-drafter"


def default_drafter() -> Path | None:
    """Path of the draft model shipped for the default model (speculative decoding), or None."""
    return DEFAULT_DRAFTER_DIR if (DEFAULT_DRAFTER_DIR / "config.json").is_file() else None
