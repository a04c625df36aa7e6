"""Resolve a CLI target: a checkpoint directory, a config.json file, or a preset name."""

from __future__ import annotations

from pathlib import Path

from k3.config import PRESETS, K3Config, load_config
from k3.models import BUNDLED, KNOWN_REPOS, ModelNotFound, resolve_model


def resolve_config(target: str) -> tuple[K3Config, Path | None, str]:
    """-> (config, checkpoint directory or None, display name), for a model reference as k3.models reads it
    (a path, "default", a downloaded repo id), or, where no weights are needed, a known repo's published
    configuration before its download, or a preset."""
    try:
        p = resolve_model(target)
    except ModelNotFound:
        p = None
    if p is not None:
        shown = "the bundled model" if target == BUNDLED and not Path(target).exists() else str(target)
        return load_config(p), (p if p.is_dir() else None), shown
    if target in KNOWN_REPOS:
        return PRESETS[KNOWN_REPOS[target]](), None, f"{target} (not downloaded: its published configuration)"
    if target in PRESETS:
        return PRESETS[target](), None, f"preset '{target}'" + (" (Kimi K3 as released)" if target == "k3" else "")
    raise FileNotFoundError(f"{target!r} is neither a checkpoint directory, a config.json, {BUNDLED!r} (the bundled "
                            f"model), a downloaded repo id (ORG/NAME), nor a preset ({', '.join(PRESETS)})")


def check_tokenizer(path, tokenizer: str | None, who: str) -> None:
    """Before loading anything: the tokenizer the command needs is there (in the CLI's words)."""
    from pathlib import Path

    from k3.chat.tokenizer import VOCAB_FILE

    if tokenizer is None and not Path(path).is_dir():
        return                                   # the loader says what is wrong with the path itself
    where = Path(tokenizer) if tokenizer else Path(path)
    if not (where / VOCAB_FILE).is_file():
        raise ValueError(f"{who} needs a tokenizer and {where} has no {VOCAB_FILE}; "
                         f"pass --tokenizer DIR (a directory with {VOCAB_FILE})")


def set_threads(threads: int | None) -> None:
    """--threads: torch's intra-op threads, which k3's native kernels use too (docs/guide/threads.md)."""
    if threads is None:
        return
    if threads < 1:
        raise ValueError("--threads must be at least 1")
    import torch

    torch.set_num_threads(threads)
