"""The answer cache behind resumable runs: one JSON line per finished item, appended and flushed as soon
as the item is done, keyed by everything that could change the answer (task content, item, settings,
model). A rerun with the same output directory reuses what matches and only runs the rest."""

from __future__ import annotations

import json
import os
from pathlib import Path

from k3.eval.tasks.base import HARNESS_VERSION, content_hash


def item_key(task_name: str, task_hash: str, item_id: str, settings: dict, model: dict) -> str:
    return content_hash([HARNESS_VERSION, task_name, task_hash, item_id, settings, model])


class AnswerCache:
    def __init__(self, path: Path):
        self.path = path
        self.records: dict[str, dict] = {}
        if path.exists():
            for line in _complete_lines(path).split(b"\n"):  # only \n ends a record (text may hold U+2028)
                if not line:
                    continue
                try:
                    row = json.loads(line.decode("utf-8"))
                except json.JSONDecodeError:
                    continue  # a damaged line: that item runs again
                self.records[row["key"]] = row["record"]

    def get(self, key: str) -> dict | None:
        return self.records.get(key)

    def put(self, key: str, record: dict) -> None:
        self.records[key] = record
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"key": key, "record": record}, ensure_ascii=False) + "\n")
            f.flush()
            os.fsync(f.fileno())


def _complete_lines(path: Path) -> bytes:
    """The file's complete lines. A crash mid-write leaves a last line without its newline: it is cut
    from the file, so the next append starts clean, and that item runs again."""
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        data = data[:data.rfind(b"\n") + 1]
        with open(path, "r+b") as f:
            f.truncate(len(data))
    return data
