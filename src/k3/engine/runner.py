"""The model runner: carries out a `SchedulerOutput` on the model's device and returns what to sample.

It is the only code that moves sequence state: swap-outs are exported (to the offloader) before any
placement is written, placed sequences get zero state or their saved/offloaded state restored, and
finished requests are saved from here. Then one step: the packed token ids, the `ForwardBatch`, the layer
views of prefill segments and the step states of decode rows (slot indices and block tables as tensors on
the device, from the persistent block-table tensor written once per request: engine/memory/step_states.py)
are built once; verify windows are recorded for rollback; the model runs, and the runner returns the
logits rows to sample plus any prompt log-probabilities asked for.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch

from k3.engine.memory.manager import Capacity, CachePools
from k3.engine.memory.step_states import build_step_states
from k3.engine.memory.sequence_state import SequenceState, export_kda, export_mla, import_mla
from k3.engine.speculative.rollback import WindowLog
from k3.engine.request import Request, TokenLogprob
from k3.engine.scheduled import OFFLOADED, PREFIX, RESUME, SchedulerOutput, SnapshotOrder
from k3.layers.batch import ForwardBatch
from k3.layers.state import StateLayout
from k3.media.image import stack_images
from k3.model.vision import Splice
from k3.ops.sampling import top_logprobs_batched


@dataclass
class StepOutput:
    logits: torch.Tensor                     # [rows, vocab]: each request's rows, in order
    requests: list[Request]                  # whose next token(s) those rows give
    drafts: list[tuple[int, ...]] = field(default_factory=list)  # per request: drafts its rows verify
    prompt_logprobs: list[tuple[Request, int, TokenLogprob]] = field(default_factory=list)
    window_log: WindowLog | None = None      # the verify windows' KDA steps, for keep_windows
    window_seqs: dict[str, int] = field(default_factory=dict)   # request id -> its batch sequence


class ModelRunner:
    def __init__(self, model, layout: StateLayout, capacity: Capacity, device: torch.device, offloader=None,
                 snapshots=None):
        """snapshots: the prefix cache's SnapshotStore (None: prefix caching off)."""
        self.model, self.device, self.offloader, self.snapshots = model, device, offloader, snapshots
        self.pools = CachePools(layout, capacity, model.compute_dtype, device)
        if snapshots is not None:
            snapshots.export_mla = lambda blocks, n: export_mla(self.pools.blocks, blocks, n)

    def move(self, out: SchedulerOutput) -> None:
        """Snapshots of reused blocks and swap-outs first (their blocks may already be someone else's),
        then placements."""
        for entry in out.evicted:
            for snap in list(entry.snapshots.values()):
                self.snapshots.evict(snap)
        for s in out.swapped_out:
            state = self.pools.export(s.placement, s.num_tokens)
            state.token_ids = s.request.all_ids[:s.num_tokens]
            self.offloader.put(s.request.request_id, state)
        for p in out.placed:
            state = None
            if p.source == OFFLOADED:
                state = self.offloader.take(p.request.request_id)
            elif p.source == RESUME:
                state = p.state
            if p.source == PREFIX:
                self._restore_snapshot(p)
            else:
                self.pools.place(p.placement, state)
        for request_id in out.prefetch:
            self.offloader.prefetch(request_id)

    def execute(self, out: SchedulerOutput) -> StepOutput:
        self.move(out)
        chunks = out.chunks
        if not chunks:
            return StepOutput(torch.empty(0), [])
        reqs = [c.request for c in chunks]
        windows = tuple(c.window for c in chunks)
        batch = ForwardBatch(tuple(c.num_tokens for c in chunks), tuple(r.num_computed for r in reqs), self.device,
                             windows if any(windows) else ())
        ids = [t for c in chunks for t in c.token_ids()]
        step = self.pools.step_index([c.placement for c in chunks], batch.context_lens)
        num_layers = self.model.config.num_hidden_layers
        views = self.pools.layer_views(step, num_layers)
        with torch.inference_mode():
            like = torch.empty(0, dtype=self.model.compute_dtype, device=self.device)
            step_states = build_step_states(self.pools, step, batch, num_layers, like)
            log = WindowLog() if any(windows) else None
            if log is not None:   # before the model steps the windows in place
                log.record_windows(batch, step_states, self.model)
        # Rows to sample: a finished prompt's or decode's last position; every position of a window.
        rows = [i for i, c in enumerate(chunks)
                if c.window or c.request.num_computed + c.num_tokens == c.request.num_tokens]
        sampled = [p for i in rows for p in range(batch.starts[i] + (0 if chunks[i].window else chunks[i].num_tokens - 1),
                                                  batch.starts[i] + chunks[i].num_tokens)]
        scored = _prompt_positions(chunks, batch)
        index = torch.tensor(sampled + [i for i, _, _ in scored], dtype=torch.long, device=self.device)
        splice = self._splice(chunks, batch)
        images = {"splice": splice} if splice is not None else {}   # a text-only model's forward never sees the word
        with torch.inference_mode():
            logits = self.model.forward_batch(torch.tensor(ids, dtype=torch.long, device=self.device), batch, views, index,
                                              step_states=step_states, **images)
        return StepOutput(logits[:len(sampled)], [reqs[i] for i in rows], [chunks[i].draft for i in rows],
                          _score_prompt(scored, logits[len(sampled):]), log,
                          {c.request.request_id: i for i, c in enumerate(chunks) if c.window})

    def _splice(self, chunks, batch: ForwardBatch) -> Splice | None:
        """Image rows for the pad positions this step computes. A request's images go through the tower
        once, at its first chunk that reaches a pad; the rows are dropped once its last pad is computed
        (made again only if the request must be computed again)."""
        positions, parts = [], []
        for c, start in zip(chunks, batch.starts):
            images, first = c.request.images, c.request.num_computed
            if images is None or first > images.last_position:
                continue
            if images.rows is None:
                images.rows = self._rows(images)
            end = first + c.num_tokens
            picked = [(p, images.row_of[p]) for p in range(first, min(end, images.last_position + 1)) if p in images.row_of]
            if picked:
                positions += [start + p - first for p, _ in picked]
                parts.append(images.rows[[r for _, r in picked]])
            if end > images.last_position:
                images.rows = None
        if not parts:
            return None
        return Splice(torch.tensor(positions, dtype=torch.long, device=self.device), torch.cat(parts))

    def _rows(self, images) -> torch.Tensor:
        """A request's image rows: those its images brought (encoded ahead, in a server's image pool; taken
        once, so their memory goes with the prefill), else the tower's now."""
        ahead = [im.rows for im in images.images]
        if all(r is not None for r in ahead):
            images.images = [replace(im, rows=None) for im in images.images]
            return torch.cat(ahead).to(self.device)
        pixels, grid = stack_images(images.images)
        return torch.cat(self.model.encode_images(pixels.to(self.device), grid))

    def keep_windows(self, result: StepOutput, kept: dict[str, int]) -> None:
        """kept: request id -> positions of its verify window to keep. KDA state of the positions not
        kept is undone (MLA rows past the kept positions are simply never read: they are overwritten)."""
        if result.window_log is not None:
            with torch.inference_mode():
                result.window_log.keep({result.window_seqs[r]: n for r, n in kept.items() if r in result.window_seqs})

    def _restore_snapshot(self, p) -> None:
        """KDA state from the snapshot; the tail's MLA rows into the request's own first block (the full
        blocks before it are shared, already holding their rows)."""
        snap = p.snapshot
        self.pools.place(p.placement, SequenceState([], kda=snap.kda))
        if snap.tail:
            block = p.placement.blocks[snap.num_tokens // self.pools.capacity.block_size]
            import_mla(self.pools.blocks, [block], snap.tail_rows)

    def take_snapshots(self, orders: list[SnapshotOrder]) -> None:
        """Copy KDA state (and tail MLA rows) out of the ordered slots into the prefix cache."""
        for o in orders:
            existing = self.snapshots.find(o.holder, o.tail)
            if existing is not None:
                self.snapshots.touch(existing)
                continue
            rows = export_mla(self.pools.blocks, [o.tail_block], len(o.tail)) if o.tail else {}
            self.snapshots.add(o.holder, o.tail, export_kda(self.pools.slots, o.slot), rows)

    def save_state(self, req: Request, placement) -> SequenceState:
        """A copy of a request's computed state, with its token ids (and the sampled, uncomputed ones)."""
        state = self.pools.export(placement, req.num_computed)
        state.token_ids, state.pending_ids = req.all_ids[:req.num_computed], req.all_ids[req.num_computed:]
        return state

    def forget(self, request_id: str) -> None:
        """Drop whatever the offloader holds for a request that ended."""
        if self.offloader is not None:
            self.offloader.discard(request_id)


def _prompt_positions(chunks, batch: ForwardBatch) -> list[tuple[int, Request, int]]:
    """(packed row, request, prompt position it predicts) for requests that asked for prompt logprobs:
    the logits at input position p score prompt token p + 1."""
    out = []
    for c, start in zip(chunks, batch.starts):
        req = c.request
        if req.prompt_logprobs is None:
            continue
        for j in range(c.num_tokens):
            if req.num_computed + j + 1 < len(req.prompt_ids):
                out.append((start + j, req, req.num_computed + j + 1))
    return out


def _score_prompt(scored, logits: torch.Tensor) -> list[tuple[Request, int, TokenLogprob]]:
    if not scored:
        return []
    tokens = [req.prompt_ids[pos] for _, req, pos in scored]
    chosen, tops = top_logprobs_batched(logits, torch.tensor(tokens, device=logits.device),
                                        [req.params.prompt_logprobs for _, req, _ in scored])
    return [(req, pos, TokenLogprob(t, lp, top)) for (_, req, pos), t, lp, top in zip(scored, tokens, chosen, tops)]
