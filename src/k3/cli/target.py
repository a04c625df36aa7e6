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
