"""Benchmark requests against the in-process k3 engine (through the same async bridge `k3 serve`
uses), recording when each token arrived; adds what only a local run can see: peak RSS and the
expert-streaming counters (GB read per token, hit rate, bandwidth)."""

from __future__ import annotations

import asyncio
import time

from k3.bench.records import RequestRecord
from k3.bench.workloads import BenchPrompt
from k3.engine import LLM, EngineConfig, SamplingParams
from k3.engine.thread import EngineThread
from k3.serve.async_engine import AsyncEngine
from k3.tools.proc_memory import peak_rss


class LocalClient:
    def __init__(self, model: str, config: EngineConfig | None = None, *, ignore_eos: bool = True,
                 temperature: float = 0.0):
        thread = EngineThread()   # built where it is stepped, as k3 serve does (engine/thread.py says why)
        self.llm = thread.call(LLM, model, config)
        self.engine = AsyncEngine(self.llm.engine, max_queued=10 ** 6, thread=thread)
        self.ignore_eos, self.temperature = ignore_eos, temperature
        self.vocab_size = self.llm.model.config.vocab_size

    async def prepare(self) -> None:
        return None

    def prompt(self, p: BenchPrompt) -> tuple[list[int], list | None]:
        """(ids, prepared images or None): chat messages are rendered as the server renders them, their
        images prepared with the checkpoint's preprocessing (part of the request's measured time, as on a server)."""
        if p.ids is not None:
            return [t % self.vocab_size for t in p.ids], None
        tok = self.llm.tokenizer
        if tok is None:
            raise ValueError("text or chat prompts need the checkpoint's tokenizer (tiktoken.model)")
        if p.messages is not None:
            from k3.chat import render
            from k3.chat.images import image_sources
            from k3.engine.image_prompts import prepare_all

            images = prepare_all(image_sources(p.messages), self.llm.media, self.llm.image_limits) or None
            return tok.encode_segments(render(p.messages, thinking=tok.thinking, images=images)), images
        return tok.encode(p.text, special=False), None

    async def send(self, p: BenchPrompt, record: RequestRecord) -> None:
        params = SamplingParams(max_tokens=p.max_tokens, temperature=self.temperature, ignore_eos=self.ignore_eos)
        record.start = time.perf_counter()
        try:
            ids, images = await asyncio.to_thread(self.prompt, p)   # decoding images off the event loop
            record.prompt_tokens = len(ids)
            async for out in self.engine.generate(ids, params, images=images):
                now = time.perf_counter()
                if out.new_token_ids:
                    record.first_token = record.first_token or now
                    record.first_visible = record.first_visible or now
                    record.chunk_times.append(now)
                    record.output_tokens += len(out.new_token_ids)
                if out.finished:
                    record.end = now
                    if out.finish_reason == "error":
                        record.error = out.error or "engine error"
        except ValueError as e:
            record.error = f"rejected: {e}"

    def local_stats(self) -> dict:
        stats = self.llm.engine.stats()
        out = {"peak_rss_bytes": peak_rss()}
        keys = ("expert_bytes_per_token", "expert_hit_rate", "read_bytes_per_s", "expert_bytes_read",
                "wait_seconds", "compute_seconds")
        out |= {k: stats.get(k, 0.0) for k in keys}  # zeros when every expert is resident
        out["gb_read_per_token"] = out["expert_bytes_per_token"] / 1e9
        out |= {k: v for k, v in stats.items() if k.startswith(("prefix_", "spec_"))}
        plan = getattr(self.llm.model, "memory_plan", None)
        out["memory_plan"] = plan.mode if plan is not None else "resident"
        return out

    async def close(self) -> None:
        self.engine.shutdown()
