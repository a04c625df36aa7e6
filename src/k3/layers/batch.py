"""ForwardBatch: the one description of a packed step that crosses from engine to model.

Sequence s contributes `seq_lens[s]` new tokens, packed in order into one [N] id tensor, and
already has `context_lens[s]` tokens in its cache. There is no padding: per-sequence operations
(KDA recurrence and conv, MLA attention) run on groups of sequences whose segments line up; the
sequences with one new token (decode) form one group whatever their cached lengths.

A sequence marked in `windows` is a speculative-decoding verify window: its few new tokens (the last
sampled token and the drafts after it) go through the decode kernels one position at a time, so each
position's result is bit for bit what decoding it alone would give, and the engine can keep any prefix.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


class cached_property:  # noqa: N801 (named as the functools descriptor it stands in for)
    """functools.cached_property without its lock: computed on first access and stored in the instance's
    __dict__ under the same name, which then shadows this (non-data) descriptor, so later reads are plain
    attribute reads. Python 3.11's version takes an RLock on the first access, a context manager
    torch.compile cannot trace, so each layer's first use broke the compiled graph. Batches are built and
    read on one thread."""

    def __init__(self, fn):
        self.fn, self.name, self.__doc__ = fn, fn.__name__, fn.__doc__

    def __get__(self, obj, owner=None):
        if obj is None:
            return self
        value = obj.__dict__[self.name] = self.fn(obj)
        return value


@dataclass(frozen=True)
class ForwardBatch:
    seq_lens: tuple[int, ...]
    context_lens: tuple[int, ...]
    device: torch.device = field(default=torch.device("cpu"), compare=False)  # where index tensors live
    windows: tuple[bool, ...] = ()   # per sequence: a verify window (empty: none)

    def __post_init__(self) -> None:
        if len(self.seq_lens) != len(self.context_lens):
            raise ValueError("seq_lens and context_lens must have one entry per sequence")
        if any(n < 1 for n in self.seq_lens) or any(c < 0 for c in self.context_lens):
            raise ValueError(f"every sequence needs >= 1 new token and >= 0 context, got {self.seq_lens}, "
                             f"{self.context_lens}")
        if self.windows and len(self.windows) != len(self.seq_lens):
            raise ValueError("windows must be empty or have one entry per sequence")

    def is_window(self, s: int) -> bool:
        return bool(self.windows) and self.windows[s]

    @classmethod
    def uniform(cls, batch_size: int, tokens: int, context: int = 0, device=torch.device("cpu")) -> "ForwardBatch":
        return cls((tokens,) * batch_size, (context,) * batch_size, torch.device(device))

    @property
    def num_seqs(self) -> int:
        return len(self.seq_lens)

    @cached_property
    def starts(self) -> tuple[int, ...]:
        out, pos = [], 0
        for n in self.seq_lens:
            out.append(pos)
            pos += n
        return tuple(out)

    @property
    def num_tokens(self) -> int:
        return sum(self.seq_lens)

    @cached_property
    def last_token_index(self) -> torch.Tensor:
        """[num_seqs] packed index of each sequence's last new token."""
        return torch.tensor([s + n - 1 for s, n in zip(self.starts, self.seq_lens)], dtype=torch.long,
                            device=self.device)

    def _memo(self) -> dict:
        return self.__dict__.setdefault("_memos", {})

    def step_groups(self) -> list["TokenGroup"]:
        """The groups of decode rows, each stepped on its sequences' state in place: the sequences with one new
        token (one group whatever their cached lengths), then verify windows by length. An attention layer
        receives one step state per group, in this order (layers/step_state.py)."""
        memo = self._memo()
        if "step" not in memo:
            memo["step"] = [g for g in self.groups(by_context=False) if g.window or g.tokens == 1]
        return memo["step"]

    def one_call_group(self) -> "TokenGroup | None":
        """The group the decode plan steps in one native call (model/plan_binding.py), when it is the whole
        batch: every sequence decoding one token, or every sequence a verify window of one length (rows
        sequence by sequence, position by position); else None."""
        groups = self.step_groups()
        return groups[0] if len(groups) == 1 and groups[0].whole else None

    def prefill_groups(self) -> list["TokenGroup"]:
        """Sequences with more than one new token, grouped by (new tokens, cached length)."""
        memo = self._memo()
        if "prefill" not in memo:
            memo["prefill"] = [g for g in self.groups(by_context=True) if g.tokens > 1 and not g.window]
        return memo["prefill"]

    def _group(self, seqs: list[int], n: int, whole: bool, window: bool = False) -> "TokenGroup":
        return TokenGroup(seqs, tuple(self.starts[s] for s in seqs), n, whole, window, self.device)

    def groups(self, by_context: bool) -> list["TokenGroup"]:
        """Sequences whose segments have equal length (and, with by_context, equal cached length), verify
        windows apart. Built once per batch and flag: every layer of a step asks for the same groups."""
        memo = self._memo()
        if by_context not in memo:
            memo[by_context] = self._make_groups(by_context)
        return memo[by_context]

    def _make_groups(self, by_context: bool) -> list["TokenGroup"]:
        keyed: dict[tuple[int, int, bool], list[int]] = {}
        for s, (n, c) in enumerate(zip(self.seq_lens, self.context_lens)):
            window = self.is_window(s)
            keyed.setdefault((n, c if by_context and not window else 0, window), []).append(s)
        # A group that holds every sequence, in order, is the packed order itself: [b, T] views suffice.
        return [self._group(seqs, n, len(keyed) == 1, w) for (n, _, w), seqs in keyed.items()]


@dataclass(frozen=True)
class TokenGroup:
    """Sequences `seqs`, whose `tokens` new tokens each start at packed positions `starts`."""
    seqs: list[int]
    starts: tuple[int, ...]
    tokens: int
    whole: bool  # the group is every packed token in order (index == arange(N).view(b, T)): views suffice
    window: bool = False  # verify windows (see ForwardBatch)
    device: torch.device = field(default=torch.device("cpu"), compare=False)

    @cached_property
    def index(self) -> torch.Tensor:
        """[b, T] packed positions of the group's tokens. Built on first use: a decode step's native path
        needs only `seqs` and `whole`, and these three small tensors cost a decode token real time
        when built cold (after the weight streams have evicted the interpreter's working set)."""
        starts = torch.tensor(self.starts, dtype=torch.long, device=self.device)
        return starts.unsqueeze(1) + torch.arange(self.tokens, device=self.device).unsqueeze(0)

    def take(self, t: torch.Tensor) -> torch.Tensor:
        """t [N, ...] packed -> [b, T, ...] for this group."""
        return t.view(len(self.seqs), self.tokens, *t.shape[1:]) if self.whole else t[self.index]

    def put(self, dst: torch.Tensor, src: torch.Tensor) -> None:
        """dst [N, ...][this group's tokens] = src [b, T, ...]."""
        if self.whole:
            dst.copy_(src.reshape(dst.shape))
        else:
            dst[self.index] = src
