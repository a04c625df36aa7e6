"""Prompt lookup (n-gram) drafting: copy what followed the last time the sequence's ending appeared."""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view


def propose_ngram(ids: list[int] | np.ndarray, k: int, n_min: int, n_max: int) -> list[int]:
    """The longest suffix of ids (n_max down to n_min tokens) that also occurs earlier in ids: up to k
    tokens that followed its latest earlier occurrence. [] when no suffix of those lengths recurs."""
    arr = np.asarray(ids, dtype=np.int64)
    L = arr.shape[0]
    for n in range(min(n_max, L - 1), n_min - 1, -1):
        # Windows starting at 0..L-n-1 (the suffix itself, at L-n, is excluded).
        starts = np.flatnonzero((sliding_window_view(arr[:-1], n) == arr[L - n:]).all(axis=1))
        if starts.size:
            i = int(starts[-1]) + n
            return arr[i:i + k].tolist()
    return []


class NgramProposer:
    def __init__(self, n_min: int, n_max: int):
        self.n_min, self.n_max = n_min, n_max

    def propose(self, items: list[tuple[list[int], int]]) -> list[list[int]]:
        """(token ids, k) per request -> its drafts."""
        return [propose_ngram(ids, k, self.n_min, self.n_max) for ids, k in items]
