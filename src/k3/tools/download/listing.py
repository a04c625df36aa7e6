"""What to fetch: the checkpoint's small files, then the shards its index names, filtered by --include."""

from __future__ import annotations

import fnmatch
import json
import re
from dataclasses import dataclass
from pathlib import Path

from k3.checkpoint.errors import CheckpointError
from k3.checkpoint.paths import check_member_name
from k3.checkpoint.reader import INDEX_FILE, text_name

# Files of the Hugging Face repo besides the shards (spec §2.1); absent ones are skipped.
REQUIRED_META = ("config.json",)
OPTIONAL_META = ("generation_config.json", "tokenizer_config.json", "tiktoken.model", "special_tokens_map.json",
                 "added_tokens.json", "chat_template.jinja", "preprocessor_config.json", "configuration_kimi_k3.py",
                 "modeling_kimi_k3.py", "modeling_kimi_linear.py", "tokenization_kimi.py", "encoding_k3.py",
                 "kimi_k3_processor.py", "kimi_k3_vision_processing.py", "media_utils.py", "README.md", "LICENSE")
EXPERT_TENSOR = re.compile(r".*\.experts\.\d+\.")
GROUPS = {"@meta": "every file that is not a weight shard", "@trunk": "shards holding any non-expert text tensor"}


@dataclass(frozen=True)
class Wanted:
    name: str
    size: int | None = None
    sha256: str | None = None
    required: bool = True


def shards_from_index(index_path: Path) -> dict[str, list[str]]:
    """shard -> tensor names, from a downloaded index (names checked to stay inside the directory)."""
    try:
        weight_map = json.loads(index_path.read_text())["weight_map"]
        shards: dict[str, list[str]] = {}
        for tensor, shard in weight_map.items():
            shards.setdefault(check_member_name(shard, source=INDEX_FILE), []).append(tensor)
        return dict(sorted(shards.items()))
    except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as e:
        raise CheckpointError(f"the mirror's index is unreadable ({e!r})", file=INDEX_FILE) from None


def is_trunk_shard(tensors: list[str]) -> bool:
    return any(text_name(t) is not None and not EXPERT_TENSOR.match(t) for t in tensors)


def selected(name: str, include: list[str] | None, shards: dict[str, list[str]]) -> bool:
    if not include:
        return True
    for pattern in include:
        if pattern == "@meta" and name not in shards:
            return True
        if pattern == "@trunk" and name in shards and is_trunk_shard(shards[name]):
            return True
        if fnmatch.fnmatchcase(name, pattern):
            return True
    return False


def check_include(include: list[str] | None) -> None:
    for pattern in include or ():
        if pattern.startswith("@") and pattern not in GROUPS:
            raise ValueError(f"--include {pattern}: unknown group; groups are "
                             + ", ".join(f"{k} ({v})" for k, v in GROUPS.items()))

