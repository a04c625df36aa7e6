"""Verify windows' KDA steps, kept for one engine step so the state of rejected drafts can be undone.

A verify window steps each KDA layer's recurrence once per position, in place on the sequence's slot, and
writes its inputs to the step state's replay tensors (layers/step_state.py). Before the model runs, the
runner records here the slots' state and the step that replays a position from those inputs. Once the drafts
are judged, `keep` gives every sequence that keeps fewer positions than its window the state from before the
window back and replays its kept positions with the same step on the same inputs: bit for bit the state
decoding those tokens one by one would have left. Restore and replay cost two state passes plus the kept
steps, and only on a rejection; keeping every position's state instead would write the whole KDA state once
per window position on every step.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from k3.layers.batch import ForwardBatch
from k3.layers.step_state import KdaStep, WindowStep


@dataclass(frozen=True)
class WindowRecord:
    recurrent: torch.Tensor               # a layer's slot pool [slots, H, K, V]
    tails: tuple[torch.Tensor, ...]       # its conv-tail pools
    seqs: tuple[int, ...]                 # batch sequences of the window group, in group order
    index: torch.Tensor                   # their slots [b]
    positions: int                        # T
    before: tuple[torch.Tensor, tuple[torch.Tensor, ...]]   # their state before the window (copies)
    step: WindowStep


class WindowLog:
    def __init__(self):
        self.records: list[WindowRecord] = []

    def record_windows(self, batch: ForwardBatch, step_states: list[tuple], model) -> None:
        """Every KDA layer's verify-window groups of a step about to run: `step_states` per layer (one per
        `batch.step_groups()`); `model.window_step(layer, replay)` gives the WindowStep that replays that
        layer's window from its replay tensors (K3ForCausalLM.window_step)."""
        for layer, states in enumerate(step_states):
            for group, state in zip(batch.step_groups(), states):
                if group.window and isinstance(state, KdaStep):
                    self.record(state.recurrent, state.tails, group.seqs, state.index, group.tokens,
                                model.window_step(layer, state.replay))

    def record(self, recurrent, tails, seqs, index: torch.Tensor, positions: int, step: WindowStep) -> None:
        """One window group before it is stepped: copies the group's state first (index_select copies whole
        slots; advanced indexing took about ten times as long for the same bytes)."""
        before = (recurrent.index_select(0, index), tuple(t.index_select(0, index) for t in tails))
        self.records.append(WindowRecord(recurrent, tails, tuple(seqs), index, positions, before, step))

    def keep(self, kept: dict[int, int]) -> None:
        """kept: batch sequence -> how many of its window positions to keep (1..T)."""
        for r in self.records:
            by_count: dict[int, list[int]] = {}
            for row, s in enumerate(r.seqs):
                n = kept.get(s, r.positions)
                if not 1 <= n <= r.positions:
                    raise ValueError(f"a window of {r.positions} positions cannot keep {n}")
                if n < r.positions:
                    by_count.setdefault(n, []).append(row)
            for n, rows in by_count.items():
                at = torch.tensor(rows, dtype=torch.long, device=r.index.device)
                index = r.index[at]
                r.recurrent.index_copy_(0, index, r.before[0].index_select(0, at))
                for pool, saved in zip(r.tails, r.before[1]):
                    pool.index_copy_(0, index, saved.index_select(0, at))
                for t in range(n):
                    r.step(t, rows, (r.recurrent, r.tails, index))
