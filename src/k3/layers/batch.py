"""ForwardBatch: the one description of a packed step that crosses from engine to model.

Sequence s contributes `seq_lens[s]` new tokens, packed in order into one [N] id tensor, and
already has `context_lens[s]` tokens in its cache. There is no padding: per-sequence operations
(KDA recurrence and conv, MLA attention) run on groups of sequences whose segments line up.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import torch


@dataclass(frozen=True)
class ForwardBatch:
    seq_lens: tuple[int, ...]
    context_lens: tuple[int, ...]

    def __post_init__(self) -> None:
        if len(self.seq_lens) != len(self.context_lens):
            raise ValueError("seq_lens and context_lens must have one entry per sequence")
        if any(n < 1 for n in self.seq_lens) or any(c < 0 for c in self.context_lens):
            raise ValueError(f"every sequence needs >= 1 new token and >= 0 context, got {self.seq_lens}, "
                             f"{self.context_lens}")

    @classmethod
    def uniform(cls, batch_size: int, tokens: int, context: int = 0) -> "ForwardBatch":
        return cls((tokens,) * batch_size, (context,) * batch_size)

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
        return torch.tensor([s + n - 1 for s, n in zip(self.starts, self.seq_lens)], dtype=torch.long)

    def groups(self, by_context: bool) -> list["TokenGroup"]:
        """Sequences whose segments have equal length (and, with by_context, equal cached length).
        Built once per batch and flag: every layer of a step asks for the same groups."""
        cache = self.__dict__.setdefault("_groups", {})
        if by_context not in cache:
            cache[by_context] = self._make_groups(by_context)
        return cache[by_context]

    def _make_groups(self, by_context: bool) -> list["TokenGroup"]:
        keyed: dict[tuple[int, int], list[int]] = {}
        for s, (n, c) in enumerate(zip(self.seq_lens, self.context_lens)):
            keyed.setdefault((n, c if by_context else 0), []).append(s)
        out = []
        for (n, _), seqs in keyed.items():
            starts = torch.tensor([self.starts[s] for s in seqs], dtype=torch.long)
            whole = len(keyed) == 1  # one group holds every sequence, in order: packed order is [b, T]
            out.append(TokenGroup(seqs, starts.unsqueeze(1) + torch.arange(n).unsqueeze(0), whole))
        return out


@dataclass(frozen=True)
class TokenGroup:
    """Sequences `seqs` whose new tokens sit at packed positions `index` [b, T]."""
    seqs: list[int]
    index: torch.Tensor
    whole: bool  # the group is every packed token in order (index == arange(N).view(b, T)): views suffice

    def take(self, t: torch.Tensor) -> torch.Tensor:
        """t [N, ...] packed -> [b, T, ...] for this group."""
        return t.view(*self.index.shape, *t.shape[1:]) if self.whole else t[self.index]

    def put(self, dst: torch.Tensor, src: torch.Tensor) -> None:
        """dst [N, ...][this group's tokens] = src [b, T, ...]."""
        if self.whole:
            dst.copy_(src.reshape(dst.shape))
        else:
            dst[self.index] = src
