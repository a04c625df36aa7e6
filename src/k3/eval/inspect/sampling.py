"""`--limit N` drawn across a task's classes, not its first N items: a quick refusal run sees unsafe prompts
too, a quick constraint run reaches long contexts, a quick challenge run has bugs and features."""

from __future__ import annotations

from itertools import zip_longest
from typing import Callable, Sequence, TypeVar

T = TypeVar("T")
_GAP = object()


def stratified(items: Sequence[T], levels: Sequence[Callable[[T], object]], n: int | None) -> list[T]:
    """The first `n` of the items interleaved group by group: round-robin over the groups of levels[0] (in the
    order they first appear), each group interleaved by levels[1], and so on; deterministic. All of them
    when n is None."""
    order = _interleave(list(items), list(levels))
    return order if n is None else order[:n]


def _interleave(items: list[T], levels: list[Callable[[T], object]]) -> list[T]:
    if not levels or len(items) < 2:
        return items
    groups: dict[object, list[T]] = {}
    for item in items:
        groups.setdefault(levels[0](item), []).append(item)
    parts = [_interleave(g, levels[1:]) for g in groups.values()]
    return [x for row in zip_longest(*parts, fillvalue=_GAP) for x in row if x is not _GAP]
