"""LLMEngine: add requests, step, abort. Owns the scheduler, the cache and the sampling of each request.

Knows nothing about HTTP or chat formats. The model is reached only through `state_spec()`,
`forward_batch(ids, ForwardBatch, layer_views, logits_index)`, `config` and `compute_dtype`.
A request whose logits turn non-finite fails alone (finish_reason "error"); the others go on.
"""

from __future__ import annotations

import functools
import logging
import random
import time

import torch

from k3.engine.cache.manager import CacheManager, fit_capacity
from k3.engine.offload import StateOffloader
from k3.engine.detokenize import OutputText
from k3.engine.request import Request, RequestOutput, SamplingParams, Status, TokenLogprob
from k3.engine.scheduler import ScheduledChunk, Scheduler
from k3.engine.state_file import check_resumable, model_fingerprint, save_state
from k3.layers.batch import ForwardBatch
from k3.ops.sampling import apply_penalties, sample_token, top_logprobs

log = logging.getLogger("k3.engine")


class LLMEngine:
    def __init__(self, model, *, max_num_seqs: int = 8, max_num_batched_tokens: int = 512,
                 cache_memory: int = 2 ** 30, block_size: int = 16, tokenizer=None, seed: int = 0,
                 max_resident_seqs: int | None = None, state_offload_dir: str | None = None):
        """max_resident_seqs: sequences whose state is in memory at once (default: as many of max_num_seqs
        as cache_memory holds). Fewer than max_num_seqs turns on state offload: the others' state waits
        on disk (in state_offload_dir, default a private temporary directory) until their turn."""
        self.model = model
        device = next(iter(model.parameters()), torch.empty(0)).device
        spec = model.state_spec()
        self.capacity = fit_capacity(spec, cache_memory, max_num_seqs, max_resident_seqs, block_size,
                                     model.compute_dtype)
        self.cache = CacheManager(spec, self.capacity, model.compute_dtype, device)
        self.offloader = (StateOffloader(state_offload_dir, spec.kda_layers, spec.mla_layers, device)
                          if self.capacity.max_seqs < max_num_seqs else None)
        self.scheduler = Scheduler(self.cache, max_num_seqs, max_num_batched_tokens, self.offloader)
        self.tokenizer = tokenizer
        self.eos_token_id = model.config.eos_token_id
        self.vocab_size = model.config.vocab_size
        self.requests: dict[str, Request] = {}
        self._seeds = random.Random(seed)
        self._step = 0
        self._arrivals = 0
        self.counters = {"steps": 0, "prompt_tokens": 0, "generated_tokens": 0, "finished": 0, "errors": 0,
                         "forward_tokens": 0, "forward_seconds": 0.0}
        log.info(self.capacity.describe())

    def add_request(self, prompt_ids: list[int], params: SamplingParams | None = None,
                    request_id: str | None = None, *, resume_state=None, save_state_path: str | None = None) -> str:
        """resume_state: a SequenceState whose tokens begin `prompt_ids`; they are not computed again.
        save_state_path: when the request finishes, its state is written there (see `k3.engine.state_file`)."""
        params = params or SamplingParams()
        prompt = self._check_prompt(prompt_ids)
        if resume_state is not None:
            check_resumable(resume_state, prompt)
        if params.stop and self.tokenizer is None:
            raise ValueError("SamplingParams.stop: stop strings need a tokenizer to detokenize; "
                             "use stop_token_ids, or give the engine a tokenizer")
        total = len(prompt) + params.max_tokens
        if not self.cache.fits_ever(total):
            raise ValueError(f"SamplingParams.max_tokens: prompt ({len(prompt)}) + max_tokens ({params.max_tokens}) "
                             f"needs {total:,} cached tokens, more than the cache holds "
                             f"({self.capacity.max_cached_tokens:,}); lower max_tokens or raise cache_memory")
        request_id = request_id or f"req-{self._arrivals}"
        if request_id in self.requests:
            raise ValueError(f"request_id {request_id!r} is already in use")
        seed = params.seed if params.seed is not None else self._seeds.getrandbits(63)
        req = Request(request_id, prompt, params, self._arrivals, torch.Generator().manual_seed(seed),
                      initial_state=resume_state, save_state_path=save_state_path)
        if self.tokenizer is not None:
            req.detok = OutputText(self.tokenizer, params.stop, params.skip_special_tokens)
        if params.prompt_logprobs is not None:
            req.prompt_logprobs = [None] * len(prompt)
        self._arrivals += 1
        self.requests[request_id] = req
        self.scheduler.add(req)
        return request_id

    def _check_prompt(self, prompt_ids) -> list[int]:
        ids = list(prompt_ids)
        if not ids:
            raise ValueError("prompt: needs at least one token id")
        bad = [t for t in ids if not isinstance(t, int) or isinstance(t, bool) or not 0 <= t < self.vocab_size]
        if bad:
            raise ValueError(f"prompt: token ids must be integers in [0, {self.vocab_size}), got {bad[:5]}")
        return ids

    def abort(self, request_id: str) -> RequestOutput | None:
        req = self.requests.get(request_id)
        return None if req is None else self._finish(req, "abort", [])

    def has_unfinished(self) -> bool:
        return self.scheduler.has_work()

    def step(self) -> list[RequestOutput]:
        chunks = self.scheduler.schedule(self._step)
        self._step += 1
        if not chunks:
            return []
        self.counters["steps"] += 1
        started = time.perf_counter()
        try:
            logits, sampled = self._run(chunks)
            self.counters["forward_tokens"] += sum(c.num_tokens for c in chunks)
            self.counters["forward_seconds"] += time.perf_counter() - started
        except Exception as e:  # a failed step fails its requests, never the engine
            log.exception("model step failed")
            return [self._finish(c.request, "error", [], f"model step failed: {type(e).__name__}: {e}") for c in chunks]
        for c in chunks:
            c.request.num_computed += c.num_tokens
            if c.request.num_computed <= len(c.request.prompt_ids):
                self.counters["prompt_tokens"] += c.num_tokens
        return [self._sample_or_fail(req, logits[row]) for row, req in enumerate(sampled)]

    def _sample_or_fail(self, req: Request, row: torch.Tensor) -> RequestOutput:
        try:
            return self._sample(req, row)
        except Exception as e:  # a sampling failure fails its request, never the engine loop
            log.exception("sampling failed")
            return self._finish(req, "error", [], f"sampling failed: {type(e).__name__}: {e}")

    def _run(self, chunks: list[ScheduledChunk]) -> tuple[torch.Tensor, list[Request]]:
        ids = [t for c in chunks for t in c.request.all_ids[c.request.num_computed:c.request.num_computed + c.num_tokens]]
        batch = ForwardBatch(tuple(c.num_tokens for c in chunks), tuple(c.request.num_computed for c in chunks))
        views = self.cache.layer_views([c.request.request_id for c in chunks], batch.context_lens,
                                       self.model.config.num_hidden_layers)
        rows = [i for i, c in enumerate(chunks) if c.request.num_computed + c.num_tokens == c.request.num_tokens]
        scored = _prompt_positions(chunks, batch)
        index = torch.cat((batch.last_token_index[rows], torch.tensor([i for i, _, _ in scored], dtype=torch.long)))
        with torch.inference_mode():
            logits = self.model.forward_batch(torch.tensor(ids, dtype=torch.long), batch, views, index)
        for (_, req, pos), row in zip(scored, logits[len(rows):]):
            token = req.prompt_ids[pos]
            req.prompt_logprobs[pos] = TokenLogprob(token, *top_logprobs(row, token, req.params.prompt_logprobs))
        return logits[:len(rows)], [chunks[i].request for i in rows]

    def _sample(self, req: Request, row: torch.Tensor) -> RequestOutput:
        if not bool(torch.isfinite(row).all()):
            return self._finish(req, "error", [], "the model produced non-finite logits (NaN/inf) for this request")
        p = req.params
        logits = row.float()
        if p.repetition_penalty != 1.0 or p.presence_penalty or p.frequency_penalty:
            logits = apply_penalties(logits, req.prompt_ids, req.output_ids, p.repetition_penalty,
                                     p.presence_penalty, p.frequency_penalty)
        token = sample_token(logits, p.temperature, p.top_k, p.top_p, p.min_p, req.generator)
        if p.logprobs is not None:
            lp, top = top_logprobs(row, token, p.logprobs)
            req.logprobs.append(TokenLogprob(token, lp, top))
        req.output_ids.append(token)
        req.first_token_time = req.first_token_time or time.perf_counter()
        self.counters["generated_tokens"] += 1
        return self._after_token(req, token)

    def _after_token(self, req: Request, token: int) -> RequestOutput:
        p = req.params
        stop_token = token in p.stop_token_ids or (token == self.eos_token_id and not p.ignore_eos)
        done = stop_token or len(req.output_ids) >= p.max_tokens
        if req.detok is not None:
            # A stop token is not part of the text; a stop string ends the request.
            if not stop_token and req.detok.add(token, final=done):
                return self._finish(req, "stop", [token])
            if stop_token:
                req.detok.finish()
        if stop_token:
            return self._finish(req, "stop", [token])
        if done:
            return self._finish(req, "length", [token])
        return self._output(req, [token])

    def _finish(self, req: Request, reason: str, new: list[int], error: str | None = None) -> RequestOutput:
        if req.save_state_path and reason in ("stop", "length"):
            self._save(req)
        req.status, req.finish_reason, req.error = Status.FINISHED, reason, error
        self.scheduler.remove(req)
        self.requests.pop(req.request_id, None)
        self.counters["finished"] += 1
        self.counters["errors"] += reason == "error"
        return self._output(req, new)

    def _save(self, req: Request) -> None:
        state = self.cache.export(req.request_id, req.num_computed)
        state.token_ids, state.pending_ids = req.all_ids[:req.num_computed], req.all_ids[req.num_computed:]
        save_state(req.save_state_path, state, self.fingerprint, self.model.compute_dtype)

    @functools.cached_property
    def fingerprint(self) -> str:
        """Identifies the model in saved state files (computed on first use)."""
        return model_fingerprint(self.model)

    def _output(self, req: Request, new: list[int]) -> RequestOutput:
        done = req.status == Status.FINISHED
        return RequestOutput(req.request_id, req.prompt_ids, list(req.output_ids), new, req.text, done,
                             req.finish_reason, list(req.logprobs) if req.params.logprobs is not None else None,
                             req.error, list(req.prompt_logprobs) if req.prompt_logprobs is not None else None)

    def stats(self) -> dict:
        out = dict(self.counters, running=len(self.scheduler.running), waiting=len(self.scheduler.waiting),
                   swapped=len(self.scheduler.swapped), **self.cache.usage())
        if self.offloader is not None:
            out |= self.offloader.counters
        store = getattr(self.model, "expert_store", None)
        if store is not None:
            tokens = self.counters["forward_tokens"]
            out |= store.stats.to_dict() | {
                "expert_bytes_per_token": store.stats.bytes_read / tokens if tokens else 0.0,
                "compute_seconds": self.counters["forward_seconds"] - store.stats.wait_seconds}
        return out


def _prompt_positions(chunks: list[ScheduledChunk], batch: ForwardBatch) -> list[tuple[int, Request, int]]:
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
