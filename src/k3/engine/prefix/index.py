"""Which MLA cache blocks hold which token prefix: a hash chain over token ids, verified by comparison.

A full block of `block_size` computed tokens is registered as a `CachedBlock` whose key hashes its
parent's key and its own token ids, so a key covers every token before it. The hash only picks a
bucket: a lookup accepts an entry only if its parent is the entry matched for the previous block (by
identity) and its token ids are equal, so a hash collision can never hand a request the state of a
different prefix. Entries are never re-keyed; evicting one also unregisters its descendants, whose
prefix no longer exists.

KDA snapshots hang on the entry of the last full block before their position (see `SnapshotStore`),
keyed by the tokens after it, so that evicting the block drops or spills them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

ROOT_KEY = 0x6B33  # the empty prefix


def default_block_hash(parent_key: int, tokens: tuple[int, ...]) -> int:
    return hash((parent_key, tokens))


@dataclass(eq=False)
class CachedBlock:
    block: int                        # physical MLA block holding these tokens' rows
    tokens: tuple[int, ...]
    parent: "CachedBlock | None"
    key: int
    depth: int                        # blocks from the root, this one included: it ends at depth * block_size
    children: list["CachedBlock"] = field(default_factory=list)
    snapshots: dict = field(default_factory=dict)   # tail tokens after this block -> Snapshot
    registered: bool = True

    @property
    def end(self) -> int:
        """Tokens from the root to the end of this block."""
        return self.depth * len(self.tokens)


class BlockIndex:
    def __init__(self, block_size: int, block_hash: Callable[[int, tuple[int, ...]], int] = default_block_hash):
        self.block_size, self.block_hash = block_size, block_hash
        self._buckets: dict[int, list[CachedBlock]] = {}
        self._by_block: dict[int, CachedBlock] = {}

    def __len__(self) -> int:
        return len(self._by_block)

    def entry(self, block: int) -> CachedBlock | None:
        return self._by_block.get(block)

    def child(self, parent: CachedBlock | None, tokens: tuple[int, ...]) -> CachedBlock | None:
        key = self.block_hash(parent.key if parent else ROOT_KEY, tokens)
        for e in self._buckets.get(key, ()):
            if e.parent is parent and e.tokens == tokens:
                return e
        return None

    def walk(self, token_ids: list[int], max_blocks: int) -> list[CachedBlock]:
        """The entries of the longest registered chain that `token_ids` begins with (at most max_blocks)."""
        bs, out, parent = self.block_size, [], None
        for k in range(max_blocks):
            e = self.child(parent, tuple(token_ids[k * bs:(k + 1) * bs]))
            if e is None:
                break
            out.append(e)
            parent = e
        return out

    def register(self, parent: CachedBlock | None, tokens: tuple[int, ...], block: int) -> CachedBlock:
        """Register `block` as holding `tokens` after `parent`'s prefix; if that prefix block is already
        registered, return the existing entry (the caller's block then stays private)."""
        existing = self.child(parent, tokens)
        if existing is not None:
            return existing
        key = self.block_hash(parent.key if parent else ROOT_KEY, tokens)
        e = CachedBlock(block, tokens, parent, key, (parent.depth if parent else 0) + 1)
        self._buckets.setdefault(key, []).append(e)
        self._by_block[block] = e
        if parent is not None:
            parent.children.append(e)
        return e

    def unregister(self, entry: CachedBlock) -> list[CachedBlock]:
        """Remove an entry and its descendants; returns them all (the caller frees blocks, drops snapshots)."""
        gone, stack = [], [entry]
        while stack:
            e = stack.pop()
            if not e.registered:
                continue
            e.registered = False
            gone.append(e)
            stack.extend(e.children)
            bucket = self._buckets[e.key]
            bucket.remove(e)
            if not bucket:
                del self._buckets[e.key]
            del self._by_block[e.block]
        if entry.parent is not None and entry in entry.parent.children:
            entry.parent.children.remove(entry)
        return gone
