"""The models on this machine, as `k3 models` lists them (as `ollama list` does): the bundled model, what
`k3 download` fetched (under K3_MODELS_DIR) and huggingface_hub snapshots of K3-family models, each with
its size on disk and whether its download is complete (every shard its index names is there, and no
partial `.k3-download` file is left)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from k3.checkpoint.errors import CheckpointError
from k3.checkpoint.reader import SINGLE_FILE, shard_map
from k3.defaults import default_model
from k3.models import BUNDLED, hub_cache_root, hub_cache_snapshot, models_dir

K3_TYPES = ("kimi_k3", "kimi_linear")


@dataclass
class LocalModel:
    name: str           # what to pass as MODEL
    path: str
    bytes: int
    status: str         # "complete", or what is missing and the fix

    def to_dict(self) -> dict:
        return asdict(self)


def local_models() -> list[LocalModel]:
    found = [_describe(BUNDLED, default_model())]
    root = models_dir()
    for config in sorted(root.glob("*/*/config.json")) if root.is_dir() else []:
        found.append(_describe(str(config.parent.relative_to(root)), config.parent))
    found += [_describe(repo, path) for repo, path in _hub_snapshots() if repo not in {m.name for m in found}]
    return found


def _hub_snapshots() -> list[tuple[str, Path]]:
    """(ORG/NAME, snapshot) of every K3-family model in the huggingface_hub cache (its `main` ref)."""
    root = hub_cache_root()
    out = []
    for folder in sorted(root.glob("models--*--*")) if root.is_dir() else []:
        repo = folder.name[len("models--"):].replace("--", "/", 1)
        snapshot = hub_cache_snapshot(repo)
        if snapshot is not None and _model_type(snapshot) in K3_TYPES:
            out.append((repo, snapshot))
    return out


def _model_type(path: Path) -> str | None:
    try:
        config = json.loads((path / "config.json").read_text())
    except (OSError, ValueError):
        return None
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}
    return text.get("model_type") if text.get("model_type") in K3_TYPES else config.get("model_type")


def _describe(name: str, path: Path) -> LocalModel:
    """Sizes through links (a hub snapshot's files are links to its blobs)."""
    size = sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return LocalModel(name, str(path), size, _status(path))


def _status(path: Path) -> str:
    partial = list((path / ".k3-download").glob("*.part")) if (path / ".k3-download").is_dir() else []
    try:
        named = set(shard_map(path))
    except CheckpointError:      # neither an index nor a shard: the configuration alone, so far
        named = {SINGLE_FILE}
    missing = sorted(f for f in named if not (path / f).is_file())
    if missing or partial:
        return (f"incomplete: {len(missing)} of {len(named)} shards missing"
                + (f", {len(partial)} partly downloaded" if partial else "") + "; `k3 download` resumes it")
    return "complete"
