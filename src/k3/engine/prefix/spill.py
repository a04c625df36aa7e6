"""The disk tier of the prefix cache: evicted snapshots written whole (KDA state plus the MLA rows of
their prefix) as saved-state files, under a byte budget, least recently used first out.

Files are indexed by a digest of the model fingerprint, the compute dtype and the token ids of the
prefix's full blocks, then by the tail tokens after them; one directory can serve several models
and survive restarts (existing files are indexed at start).
A hit is read back through `load_state`, which checks format, model and dtype, and its token ids are
compared with the request's: a digest collision or a stale file is a miss, never wrong state.
Writes run in a background thread, to a temporary name that is then renamed.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open

from k3.config import private
from k3.engine.memory.sequence_state import SequenceState
from k3.engine.state_file import load_state, save_state

log = logging.getLogger("k3.engine")


@dataclass
class _File:
    path: Path
    nbytes: int
    key: tuple[str, tuple[int, ...]]      # (digest of the full blocks, tail tokens)
    write: Future | None = None


class SpilledSnapshots:
    def __init__(self, directory: str | Path, budget_bytes: int, block_size: int, fingerprint: str,
                 dtype: torch.dtype):
        self.dir = Path(directory)
        try:
            self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            private.check_dir(self.dir, "prefix_cache_spill_dir", tighten=True)
            probe = self.dir / ".k3-write-probe"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as e:
            raise ValueError(f"prefix_cache_spill_dir {self.dir}: cannot write there ({e.strerror or e}); give a "
                             "writable directory") from None
        self.budget_bytes, self.block_size = budget_bytes, block_size
        self.fingerprint, self.dtype = fingerprint, dtype
        self._files: OrderedDict[tuple[str, tuple[int, ...]], _File] = OrderedDict()   # least recently used first
        self._tails: dict[str, set[tuple[int, ...]]] = {}
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="k3-prefix-spill")
        self.nbytes = 0
        self.counters = {"prefix_spill_writes": 0, "prefix_spill_reads": 0, "prefix_spill_rejected": 0}
        self._index_existing()

    def digests(self, token_ids: list[int], max_blocks: int) -> list[str]:
        """[d_0 .. d_max_blocks]: d_k names the full blocks token_ids[:k * block_size]."""
        h = hashlib.blake2b(f"{self.fingerprint}|{self.dtype}".encode(), digest_size=20)
        out, bs = [h.hexdigest()], self.block_size
        for k in range(max_blocks):
            h.update(json.dumps(token_ids[k * bs:(k + 1) * bs]).encode())
            out.append(h.hexdigest())
        return out

    def _key(self, token_ids: list[int]) -> tuple[str, tuple[int, ...]]:
        k = len(token_ids) // self.block_size
        return self.digests(token_ids, k)[-1], tuple(token_ids[k * self.block_size:])

    def put(self, state: SequenceState) -> None:
        key = self._key(state.token_ids)
        if key in self._files:
            self._files.move_to_end(key)
            return
        if not state.token_ids or state.nbytes > self.budget_bytes:
            return
        while self._files and self.nbytes + state.nbytes > self.budget_bytes:
            self._remove(next(iter(self._files)))
        name = hashlib.blake2b(f"{key[0]}|{key[1]}".encode(), digest_size=20).hexdigest()
        path = self.dir / f"{name}.safetensors"
        write = self._pool.submit(save_state, path, state, self.fingerprint, self.dtype)
        self._add(_File(path, state.nbytes, key, write))
        self.counters["prefix_spill_writes"] += 1

    def _add(self, f: _File) -> None:
        self._files[f.key] = f
        self._tails.setdefault(f.key[0], set()).add(f.key[1])
        self.nbytes += f.nbytes

    def find(self, token_ids: list[int], above: int) -> SequenceState | None:
        """The longest spilled state for a proper prefix of token_ids longer than `above` tokens, or None."""
        bs, limit = self.block_size, len(token_ids) - 1
        if not self._files or limit <= above:
            return None
        digests = self.digests(token_ids, limit // bs)
        for k in range(limit // bs, -1, -1):
            if k * bs + bs - 1 <= above:
                break
            tails = [t for t in self._tails.get(digests[k], ()) if above < k * bs + len(t) <= limit
                     and tuple(token_ids[k * bs:k * bs + len(t)]) == t]
            for tail in sorted(tails, key=len, reverse=True):
                state = self._read((digests[k], tail), token_ids[:k * bs + len(tail)])
                if state is not None:
                    return state
        return None

    def _read(self, key, expected: list[int]) -> SequenceState | None:
        f = self._files[key]
        try:
            if f.write is not None:
                f.write.result()
            state = load_state(f.path, self.fingerprint, self.dtype)
        except Exception as e:  # noqa: BLE001 - any unreadable file is a miss (and recomputed), never a failed step
            log.warning("prefix cache: spilled snapshot %s is unusable (%s); dropped", f.path, e)
            state = None
        if state is None or state.token_ids != expected:
            self.counters["prefix_spill_rejected"] += 1
            self._remove(key)
            return None
        self._files.move_to_end(key)
        self.counters["prefix_spill_reads"] += 1
        return state

    def _remove(self, key) -> None:
        f = self._files.pop(key)
        self._tails[key[0]].discard(key[1])
        if f.write is not None:
            try:
                f.write.result()
            except OSError:
                pass  # it is being removed anyway
        f.path.unlink(missing_ok=True)
        self.nbytes -= f.nbytes

    def _index_existing(self) -> None:
        """Files a previous run left (oldest first): indexed if they belong to this model and dtype. Only regular
        files of this user's are looked at (by lstat: a symlink, dangling or not, a FIFO or a device is passed
        over, never opened); a file is read only through load_state, which checks its signature."""
        for path, st in sorted(self._own_files(), key=lambda f: f[1].st_mtime):
            try:
                with safe_open(str(path), framework="pt") as f:
                    meta = f.metadata() or {}
                token_ids = [int(t) for t in json.loads(meta.get("token_ids", "[]"))]
            except Exception:  # noqa: BLE001 - a foreign or broken file is simply not ours
                continue
            if meta.get("model") != self.fingerprint or meta.get("dtype") != str(self.dtype) or not token_ids:
                continue
            if self.nbytes + st.st_size > self.budget_bytes:
                break
            self._add(_File(path, st.st_size, self._key(token_ids)))

    def _own_files(self) -> list[tuple[Path, os.stat_result]]:
        found = []
        with os.scandir(self.dir) as entries:
            for entry in entries:
                if not entry.name.endswith(".safetensors"):
                    continue
                st = entry.stat(follow_symlinks=False)
                try:
                    private.check_file(st, Path(entry.path), "spilled snapshot", secret=False)
                except private.NotPrivate as e:
                    log.warning("prefix cache: %s; passed over", e)
                    continue
                found.append((Path(entry.path), st))
        return found

    def stats(self) -> dict:
        return dict(self.counters, prefix_spill_files=len(self._files), prefix_spill_bytes=self.nbytes)

    def wait(self) -> None:
        """Until every write submitted so far is on disk (a failed one is dropped, with a warning)."""
        for key, f in list(self._files.items()):
            if f.write is None:
                continue
            try:
                f.write.result()
                f.write = None
            except OSError as e:
                log.warning("prefix cache: writing %s failed (%s); dropped", f.path, e)
                self._remove(key)

    def close(self) -> None:
        self.wait()
        self._pool.shutdown(wait=True)
