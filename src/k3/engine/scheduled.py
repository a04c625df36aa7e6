"""What the scheduler decides (k3/engine/scheduler.py) and hands the runner: a step's scheduled chunks (which
requests run how many tokens, verify windows), the sequences placed (and where their state comes from),
swapped out, the snapshots to take, and the requests it let go. Frozen records: the scheduler writes them,
the runner carries them out."""

from __future__ import annotations

from dataclasses import dataclass, field

from k3.engine.memory.allocator import Placement
from k3.engine.memory.sequence_state import SequenceState
from k3.engine.prefix.index import CachedBlock
from k3.engine.prefix.snapshots import Snapshot
from k3.engine.request import Request

# Where a placed sequence's state comes from: zero, request.initial_state (saved or spilled state),
# the offloader, or a prefix-cache snapshot plus shared blocks.
NEW, RESUME, OFFLOADED, PREFIX = "new", "resume", "offloaded", "prefix"


@dataclass(frozen=True)
class ScheduledChunk:
    request: Request
    num_tokens: int                    # counting the drafts
    placement: Placement | None = None
    draft: tuple[int, ...] = ()        # speculative drafts after the request's pending token: a verify window

    @property
    def window(self) -> bool:
        return bool(self.draft)

    def token_ids(self) -> list[int]:
        req = self.request
        return req.all_ids[req.num_computed:req.num_computed + self.num_tokens - len(self.draft)] + list(self.draft)


@dataclass(frozen=True)
class Placed:
    request: Request
    placement: Placement
    source: str            # NEW, RESUME, OFFLOADED or PREFIX (see above)
    snapshot: Snapshot | None = None   # PREFIX: the KDA state (and tail rows) to restore
    state: SequenceState | None = None  # RESUME: the saved or spilled state to import


@dataclass(frozen=True)
class SwappedOut:
    request: Request
    placement: Placement   # what it held, already released: export before anything is placed
    num_tokens: int


@dataclass(frozen=True)
class SnapshotOrder:
    holder: CachedBlock | None   # the last full block before the position (None: the root)
    tail: tuple[int, ...]        # tokens after it, up to the position
    slot: int                    # whose KDA state, as it is now
    tail_block: int | None       # the request's block holding the tail's MLA rows


@dataclass(frozen=True)
class Finished:
    """A request the scheduler let go (finished, aborted, failed), with what the runner copies before its
    slot and blocks are used again (nothing is placed before the next `schedule()`)."""
    request: Request
    placement: Placement | None        # where its state was, already released (None: never placed)
    snapshot: SnapshotOrder | None     # where the next turn of its conversation begins (prefix caching)


@dataclass
class SchedulerOutput:
    chunks: list[ScheduledChunk] = field(default_factory=list)
    swapped_out: list[SwappedOut] = field(default_factory=list)
    placed: list[Placed] = field(default_factory=list)
    prefetch: list[str] = field(default_factory=list)
    evicted: list[CachedBlock] = field(default_factory=list)   # blocks being reused: spill or drop their snapshots first
    snapshots: list[SnapshotOrder] = field(default_factory=list)  # filled by update()

    @property
    def num_tokens(self) -> int:
        return sum(c.num_tokens for c in self.chunks)
