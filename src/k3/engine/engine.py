"""LLMEngine: add requests, step, abort. The loop that ties the scheduler (decides, allocates), the runner
(moves state, runs the model) and the sampler (samples), and the only place a request's lifecycle ends.

Knows nothing about HTTP or chat formats. The model is reached only through `state_layout()`,
`forward_batch(ids, ForwardBatch, layer_views, logits_index)`, `config` and `compute_dtype`.
A request whose logits turn non-finite fails alone (finish_reason "error"); the others go on.
After every step the engine publishes a statistics snapshot (`stats_snapshot()`), which other threads
(the server's metrics) read instead of the engine's live structures.
"""

from __future__ import annotations

import functools
import logging
import random
import time
from types import MappingProxyType

import torch

from k3.engine import admission
from k3.engine.memory.allocator import CacheAllocator
from k3.engine.memory.manager import fit_capacity
from k3.engine.prefix.setup import build_prefix_cache, snapshot_budget, snapshot_bytes
from k3.engine.config import EngineConfig
from k3.engine.detokenize import OutputText, usable_vocab
from k3.engine.emit import emit, final_reason
from k3.engine.memory.offload import StateOffloader
from k3.engine.request import Request, RequestOutput, SamplingParams, Status
from k3.engine.runner import ModelRunner
from k3.engine.sampler import Sampler
from k3.engine.scheduler import Scheduler
from k3.engine.structured.matcher import Grammars
from k3.engine.state_file import model_fingerprint, save_state

log = logging.getLogger("k3.engine")


class EngineDead(RuntimeError):
    """The engine cannot go on: a failed step could not even fail its requests cleanly."""


class LLMEngine:
    def __init__(self, model, config: EngineConfig | None = None, *, tokenizer=None, drafter=None):
        """config: the engine's settings (k3.EngineConfig, validated when made; its load settings were used
        by whoever loaded `model`). Fewer max_resident_seqs than max_num_seqs turns on state offload: the
        others' state waits on disk until their turn. drafter: the speculative.Drafter that
        config.speculative_config describes, built outside the engine (`build_engine` does both)."""
        config = config or EngineConfig()
        if (config.speculative_config is None) != (drafter is None):
            raise ValueError("speculative_config and drafter go together: build the engine with "
                             "k3.engine.build_engine(model, config), which makes the drafter the config describes")
        self.model, self.config = model, config
        device = next(iter(model.parameters()), torch.empty(0)).device
        layout = model.state_layout()
        prefix_on = config.enable_prefix_caching and bool(layout.mla_layers)  # blocks address the prefixes
        one_snapshot = snapshot_bytes(layout, model.compute_dtype)
        budget = snapshot_budget(prefix_on, config.prefix_cache_memory, config.cache_memory, one_snapshot,
                                 config.max_resident_seqs or config.max_num_seqs)
        try:
            self.capacity = fit_capacity(layout, config.cache_memory - budget, config.max_num_seqs,
                                         config.max_resident_seqs, config.block_size, model.compute_dtype)
        except ValueError as e:
            if not budget:
                raise
            raise ValueError(f"{e} (the budget left after prefix_cache_memory's {budget:,} B for prefix-cache "
                             "snapshots; lower prefix_cache_memory or turn prefix caching off)") from None
        offload = self.capacity.max_seqs < config.max_num_seqs
        offloader = StateOffloader(config.state_offload_dir, layout.kda_layers, layout.mla_layers, device) if offload else None
        prefix = build_prefix_cache(budget, one_snapshot, config.block_size, config.prefix_cache_spill_dir,
                                    config.prefix_cache_spill_bytes, lambda: self.fingerprint, model.compute_dtype,
                                    quiet=config.prefix_cache_memory == 0) if prefix_on else None
        self.prefix_cache = prefix
        self.driver = None   # the AsyncEngine stepping this engine from its own thread, if any
        self.allocator = CacheAllocator(self.capacity, bool(layout.mla_layers), prefix.index if prefix else None)
        self.scheduler = Scheduler(self.allocator, config.max_num_seqs, config.max_num_batched_tokens, offload,
                                   prefix=prefix)
        self.runner = ModelRunner(model, layout, self.capacity, device, offloader, prefix.store if prefix else None)
        self.tokenizer = tokenizer
        self.eos_token_id = model.config.eos_token_id
        self.vocab_size = model.config.vocab_size
        self.usable_vocab = usable_vocab(self.vocab_size, tokenizer)
        self.holes = frozenset(h for h in getattr(tokenizer, "holes", ()) if h < self.usable_vocab)
        self.sampler = Sampler(self.usable_vocab, self.holes)
        self.grammars: Grammars | None = None   # built on the first constrained request
        self.max_model_len = admission.max_model_len(config.max_model_len, self.capacity, model.config)
        self.requests: dict[str, Request] = {}
        self._seeds = random.Random(config.seed)
        self._arrivals = 0
        self.counters = {"steps": 0, "prompt_tokens": 0, "generated_tokens": 0, "finished": 0, "errors": 0,
                         "forward_tokens": 0, "forward_seconds": 0.0}
        self.drafter = drafter
        self._snapshot = MappingProxyType({})
        self._publish()
        log.info(self.capacity.describe())

    def add_request(self, prompt_ids: list[int], params: SamplingParams | None = None,
                    request_id: str | None = None, *, resume_state=None, save_state_path: str | None = None,
                    images: list | None = None) -> str:
        """resume_state: a SequenceState whose tokens begin `prompt_ids`; they are not computed again.
        save_state_path: when the request finishes, its state is written there (see `k3.engine.state_file`).
        images: k3.media.PreparedImage's whose rows replace the prompt's image pads, in order."""
        params = params or SamplingParams()
        prompt = admission.check(self, prompt_ids, params, resume_state)
        placed = admission.check_images(self, prompt, images, resume_state, save_state_path)
        request_id = request_id or f"req-{self._arrivals}"
        if request_id in self.requests:
            raise ValueError(f"request_id {request_id!r} is already in use")
        seed = (params.seed if params.seed is not None else self._seeds.getrandbits(63)) % 2 ** 63
        req = Request(request_id, prompt, params, self._arrivals, seed,
                      initial_state=resume_state, save_state_path=save_state_path, images=placed,
                      detok=None if self.tokenizer is None else OutputText(self.tokenizer, params.stop,
                                                                          params.skip_special_tokens),
                      prompt_logprobs=None if params.prompt_logprobs is None else [None] * len(prompt),
                      constraint=None if params.structured_outputs is None
                      else self._grammars().compile(params.structured_outputs))
        self._arrivals += 1
        self.requests[request_id] = req
        self.scheduler.add(req)
        self._publish()
        return request_id

    def _grammars(self) -> Grammars:
        if self.tokenizer is None:
            raise ValueError("SamplingParams.structured_outputs: constrained decoding needs the engine's tokenizer "
                             "(give the engine one, or load a checkpoint with tiktoken.model)")
        if self.grammars is None:
            self.grammars = Grammars(self.tokenizer, self.vocab_size, self.eos_token_id)
        return self.grammars

    def abort(self, request_id: str) -> RequestOutput | None:
        req = self.requests.get(request_id)
        if req is None:
            return None
        out = self._finish(req, "abort", [])
        self._publish()
        return out

    def has_unfinished(self) -> bool:
        return self.scheduler.has_work()

    def step(self) -> list[RequestOutput]:
        """One engine step. A failure of the model call fails that step's requests; a failure anywhere else
        in the step (scheduling, sampling, emitting, bookkeeping) fails every unfinished request, since the
        step may have left them half-updated, and the engine goes on empty. Only when even that fails is
        the engine beyond use: EngineDead, which its driver reports (the server's /health then says 503)."""
        try:
            return self._step()
        except Exception as e:
            log.exception("engine step failed outside the model call")
            return self._fail_unfinished(f"engine step failed: {type(e).__name__}: {e}", e)

    def _fail_unfinished(self, message: str, cause: Exception) -> list[RequestOutput]:
        outs = []
        for req in list(self.requests.values()):
            try:
                outs.append(self._finish(req, "error", [], message))
            except Exception as e:
                raise EngineDead(f"{message}; then failing its requests failed too ({type(e).__name__}: {e})") from cause
        self._publish()
        return outs

    def _step(self) -> list[RequestOutput]:
        """One direction: the scheduler decides, the runner carries it out (state moves, the forward), the
        sampler samples, `_update_from_output` applies all of it, and the drafter drafts for the next step."""
        scheduled = self.scheduler.schedule()
        if not scheduled.chunks and not scheduled.placed and not scheduled.swapped_out:
            return []
        started = time.perf_counter()
        try:
            result = self.runner.execute(scheduled)
        except Exception as e:  # a failed step fails its requests, never the engine
            log.exception("model step failed")
            failed = {c.request.request_id: c.request for c in scheduled.chunks} | {p.request.request_id: p.request for p in scheduled.placed}
            outs = [self._finish(r, "error", [], f"model step failed: {type(e).__name__}: {e}") for r in failed.values()]
            self._publish()
            return outs
        self.counters["forward_seconds"] += time.perf_counter() - started
        samples = self.sampler(result.logits, result.requests, result.drafts)
        outs = self._update_from_output(scheduled, result, samples)
        if self.drafter is not None:   # drafts for the requests that moved (the others keep theirs)
            self.drafter.propose([c.request for c in scheduled.chunks if c.request.status == Status.RUNNING])
        self._publish()
        return outs

    def _update_from_output(self, scheduled, result, samples) -> list[RequestOutput]:
        """Everything a step's output changes, in one place: each request's new tokens (a verify window's
        rejected drafts undone in the state), computed counts, prefix snapshots, prompt log-probabilities,
        the drafter's acceptance record, counters, and the requests that finish."""
        emitted = [emit(req, s, self.eos_token_id) for req, s in zip(result.requests, samples)]
        # A window keeps its pending token and the accepted drafts that were emitted (not those past a stop).
        kept = {req.request_id: min(len(new), 1 + s.accepted) or 1
                for req, s, d, (new, _, _) in zip(result.requests, samples, result.drafts, emitted) if d}
        self.runner.keep_windows(result, kept)
        ends = {}   # request id -> (final reason, tokens appended, error)
        for req, s, d, (new, reason, error) in zip(result.requests, samples, result.drafts, emitted):
            if d and self.drafter is not None and s.tokens:
                self.drafter.observe(req, len(d), s.accepted)
            if reason:
                ends[req.request_id] = (*final_reason(req, reason, new, self.eos_token_id), s.error or error)
        ending = [(req, ends[req.request_id][0] != "error") for req in result.requests if req.request_id in ends]
        snapshots, finished = self.scheduler.update_from_output(scheduled, kept, ending)
        self.runner.take_snapshots(snapshots)
        for req, pos, lp in result.prompt_logprobs:
            req.prompt_logprobs[pos] = lp
        self.counters["steps"] += 1
        self.counters["forward_tokens"] += scheduled.num_tokens
        self.counters["prompt_tokens"] += sum(_prompt_tokens(c) for c in scheduled.chunks)
        self.counters["generated_tokens"] += sum(len(new) for new, _, _ in emitted)
        done = {f.request.request_id: self._let_go(f, *ends[f.request.request_id]) for f in finished}
        return [done.get(req.request_id) or self._output(req, new) for req, (new, _, _) in zip(result.requests, emitted)]

    def _finish(self, req: Request, reason: str, new: list[int], error: str | None = None) -> RequestOutput:
        """A request ends outside a step's output (an abort, a failed step): the scheduler lets it go."""
        return self._let_go(self.scheduler.finish(req, keep=reason != "error"), reason, new, error)

    def _let_go(self, f, reason: str, new: list[int], error: str | None) -> RequestOutput:
        """The runner copies what a finished request leaves (its conversation's snapshot, its saved state)
        and forgets it; its last output."""
        req = f.request
        if f.snapshot is not None:   # where the next turn of its conversation begins
            self.runner.take_snapshots([f.snapshot])
        if req.save_state_path and reason in ("stop", "length", "invalid") and f.placement is not None:
            state = self.runner.save_state(req, f.placement)
            save_state(req.save_state_path, state, self.fingerprint, self.model.compute_dtype)
        req.finish_reason, req.error = reason, error
        self.runner.forget(req.request_id)
        if self.drafter is not None:
            self.drafter.forget(req.request_id)
        self.requests.pop(req.request_id, None)
        self.counters["finished"] += 1
        self.counters["errors"] += reason == "error"
        return self._output(req, new)

    @functools.cached_property
    def fingerprint(self) -> str:
        """Identifies the model in saved state files (computed on first use)."""
        return model_fingerprint(self.model)

    def _output(self, req: Request, new: list[int]) -> RequestOutput:
        done = req.status == Status.FINISHED
        return RequestOutput(req.request_id, req.prompt_ids, list(req.output_ids), new, req.text, done,
                             req.finish_reason, list(req.logprobs) if req.params.logprobs is not None else None,
                             req.error, list(req.prompt_logprobs) if req.prompt_logprobs is not None else None,
                             req.warning)

    def close(self) -> None:
        """With a prefix-cache spill directory: write the snapshots still in memory there, so the next
        engine on that directory resumes from them. Safe to call more than once."""
        if self.prefix_cache is not None:
            self.prefix_cache.store.flush()

    def stats(self) -> dict:
        """Live statistics: call from the thread that steps the engine (others read `stats_snapshot()`)."""
        out = dict(self.counters, **self.scheduler.counts(), **self.allocator.usage())
        if self.runner.offloader is not None:
            out |= self.runner.offloader.counters
        if self.prefix_cache is not None:
            out |= self.prefix_cache.stats()
        if self.drafter is not None:
            out |= self.drafter.stats()
        store = getattr(self.model, "expert_store", None)
        if store is not None:
            tokens = self.counters["forward_tokens"]
            out |= store.stats.to_dict() | {
                "expert_bytes_per_token": store.stats.bytes_read / tokens if tokens else 0.0,
                "compute_seconds": self.counters["forward_seconds"] - store.stats.wait_seconds}
        trunk = getattr(self.model, "trunk_store", None)
        if trunk is not None:
            tokens = self.counters["forward_tokens"]
            out |= trunk.stats.to_dict() | {"trunk_bytes_per_token": trunk.stats.bytes_read / tokens if tokens else 0.0}
        return out

    def stats_snapshot(self):
        """The statistics as of the end of the last step, add or abort: a read-only mapping that is
        replaced whole (never mutated), so any thread may read it while the engine runs."""
        return self._snapshot

    def _publish(self) -> None:
        self._snapshot = MappingProxyType(self.stats())


def _prompt_tokens(chunk) -> int:
    """How many of a computed chunk's tokens were prompt tokens (num_computed already includes it)."""
    start = chunk.request.num_computed - chunk.num_tokens
    return min(chunk.num_tokens, max(0, len(chunk.request.prompt_ids) - start))
