"""One naming scheme for models, the same in every command and in Python.

A model reference is, in this order:
  - a path that exists: a checkpoint directory (or, where only a config is needed, a config.json);
  - "default": the small model bundled with k3 (`k3.default_model()`);
  - a Hugging Face repo id, ORG/NAME: its copy downloaded by `k3 download ORG/NAME` (under
    K3_MODELS_DIR, default ~/.cache/k3/models/ORG/NAME) or by huggingface_hub (its hub cache);
  - a preset name (`k3`, `tiny`, ... from `k3 inspect --help`): a configuration without weights, which
    inspect, plan, doctor and synth take; commands that run weights refuse it and say what to use.
"""

from __future__ import annotations

import os
from pathlib import Path

from k3.config import env
from k3.defaults import default_model

BUNDLED = "default"
# Repo ids whose configuration k3 knows without a download (plan/doctor/inspect before 1.56 TB arrive).
KNOWN_REPOS = {"moonshotai/Kimi-K3": "k3"}
HUB = "https://huggingface.co"


class ModelNotFound(FileNotFoundError, ValueError):
    """A model reference that names nothing runnable here; the message says what would. A ValueError too:
    it is a bad argument, as a broken config is."""


def models_dir() -> Path:
    return env.folder("K3_MODELS_DIR", "models")


def is_repo_id(name: str) -> bool:
    parts = name.split("/")
    return len(parts) == 2 and all(parts) and not name.startswith((".", "~")) and " " not in name


def hub_cache_root() -> Path:
    """huggingface_hub's cache folder: HF_HUB_CACHE, else HF_HOME/hub, else ~/.cache/huggingface/hub."""
    return Path(os.environ.get("HF_HUB_CACHE") or Path(os.environ.get("HF_HOME") or
                                                       Path.home() / ".cache" / "huggingface") / "hub")


def hub_cache_snapshot(repo: str) -> Path | None:
    """The snapshot huggingface_hub downloaded for `repo` (its `main` ref), if any."""
    folder = hub_cache_root() / ("models--" + repo.replace("/", "--"))
    ref = folder / "refs" / "main"
    if ref.is_file():
        snapshot = folder / "snapshots" / ref.read_text().strip()
        if (snapshot / "config.json").is_file():
            return snapshot
    return None


def downloaded(repo: str) -> Path | None:
    """Where `repo` lies on this machine (k3's download folder first, then the hub cache), or None."""
    mine = models_dir() / repo
    if (mine / "config.json").is_file():
        return mine
    return hub_cache_snapshot(repo)


def resolve_model(name: str | os.PathLike | None) -> Path:
    """A checkpoint directory to load, from a model reference (None: the bundled model)."""
    from k3.config import PRESETS

    if name is None:
        return default_model()
    path = Path(name).expanduser()
    if path.exists():                                     # the order the module's docstring gives
        return path
    text = str(name)
    if text == BUNDLED:
        return default_model()
    if is_repo_id(text):
        found = downloaded(text)
        if found is not None:
            return found
        raise ModelNotFound(f"{text} is not downloaded here; fetch it with `k3 download {text}` (into "
                            f"{models_dir() / text}), or pass the checkpoint directory")
    if text in PRESETS:
        raise ModelNotFound(f"{text!r} is a preset: a configuration without weights (k3 inspect, plan and doctor "
                            f"take it). To run a model give a checkpoint directory, a downloaded repo id "
                            f"(moonshotai/Kimi-K3 after `k3 download moonshotai/Kimi-K3`), or {BUNDLED!r} for the "
                            "small model bundled with k3")
    raise ModelNotFound(f"no checkpoint at {text!r}: give a checkpoint directory, a Hugging Face repo id "
                        f"(ORG/NAME, downloaded with `k3 download`), or {BUNDLED!r} for the bundled model")


def hub_mirror(repo: str, revision: str = "main") -> str:
    """The download address of `repo`'s files, honouring HF_ENDPOINT (a mirror or a local copy)."""
    endpoint = (os.environ.get("HF_ENDPOINT") or HUB).rstrip("/")
    return f"{endpoint}/{repo}/resolve/{revision}/"
