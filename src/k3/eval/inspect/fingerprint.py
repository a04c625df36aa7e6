"""A task's fingerprint, in every log k3 writes (the task's metadata, key "fingerprint"): sha256 over what decides
its scores, so two results are comparable only when their fingerprints match (`--report-from` refuses to
mix them). It covers the data (files, and the sha256 of each pinned package the data come from), the
prompt templates, and the source of the modules that build and score the task."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

from k3.eval.fetch import Pinned


def task_fingerprint(files=(), texts=(), modules=(), pins: tuple[Pinned, ...] = ()) -> str:
    """files: data files and source files loaded by path (the sandbox's judge); texts: prompt templates and other
    strings; modules: names of the modules whose source decides the scores (imported already); pins: the
    pinned packages the data come from."""
    h = hashlib.sha256()
    for path in files:
        h.update(b"file\0" + Path(path).name.encode() + b"\0" + Path(path).read_bytes() + b"\0")
    for text in texts:
        h.update(b"text\0" + str(text).encode() + b"\0")
    for name in ([modules] if isinstance(modules, str) else modules):
        source = getattr(sys.modules[name], "__file__", None)
        h.update(b"module\0" + name.encode() + b"\0" + (Path(source).read_bytes() if source else b"") + b"\0")
    for pin in pins:
        h.update(b"pin\0" + pin.spec.encode() + b"\0" + pin.sha256.encode() + b"\0")
    return h.hexdigest()
