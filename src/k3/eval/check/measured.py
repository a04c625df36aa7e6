"""`k3check/NAME`: an OpenAI-compatible endpoint as an Inspect model provider that streams every call and
times it the way `k3 bench` does (TTFT, time to first visible token, TPOT, end-to-end, tokens), so an
evaluation's items carry their latency. Each call's RequestRecord goes into its ModelOutput's metadata
(`k3_timing`), hence into the Inspect log beside the item's score."""

from __future__ import annotations

import asyncio
import json
import random
import time
from typing import Any

import httpx
from inspect_ai.model import (ChatCompletionChoice, GenerateConfig, ModelAPI, ModelOutput, ModelUsage, modelapi)

from k3.bench.records import RequestRecord
from k3.eval.inspect.messages import to_k3, tool_choice_to_k3, tools_to_k3
from k3.eval.check.stream import Reply

STOP = {"stop": "stop", "length": "max_tokens", "tool_calls": "tool_calls"}


class EndpointFailed(RuntimeError):
    """A call that got no whole answer: the connection failed or dropped, or the server answered an error.
    Raised (not returned as an empty answer) so Inspect retries it, and a run it keeps failing ends in
    error: a check never scores an answer the endpoint did not give."""

    def __init__(self, message: str, transient: bool):
        super().__init__(message)
        self.transient = transient


@modelapi(name="k3check")
class MeasuredAPI(ModelAPI):
    def __init__(self, model_name: str, base_url: str | None = None, api_key: str | None = None,
                 config: GenerateConfig = GenerateConfig(), thinking: bool | None = None, timeout: float = 600.0,
                 rate: float | None = None, seed: int = 0, **_: Any):
        """rate: calls a second released by a Poisson process (each call waits for its arrival), None: at once."""
        super().__init__(model_name=model_name, base_url=base_url, api_key=api_key, config=config)
        if not base_url:
            raise ValueError("k3check needs base_url: the endpoint's OpenAI root (http://host:8000/v1)")
        self.thinking, self.rate = thinking, rate
        self.arrivals, self.next_arrival = random.Random(seed), None
        headers = {"Authorization": f"Bearer {api_key}"} if api_key and api_key != "none" else {}
        self.http = httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(timeout, connect=10.0))
        self.calls = 0

    def max_connections(self) -> int:
        return 8

    def should_retry(self, ex: Exception) -> bool:
        """A dropped connection or a server error may pass; a refused request (HTTP 4xx but 429) will not."""
        return isinstance(ex, EndpointFailed) and ex.transient

    async def generate(self, input, tools, tool_choice, config: GenerateConfig) -> ModelOutput:
        body: dict = {"model": self.model_name, "messages": to_k3(input), "stream": True,
                      "stream_options": {"include_usage": True}, "max_tokens": config.max_tokens or 1024}
        for key, value in (("temperature", config.temperature), ("top_p", config.top_p), ("seed", config.seed),
                           ("stop", config.stop_seqs)):
            if value is not None:
                body[key] = value
        if tools:
            body["tools"], body["tool_choice"] = tools_to_k3(tools), tool_choice_to_k3(tool_choice)
        if self.thinking is not None:
            body["chat_template_kwargs"] = {"thinking": self.thinking, "enable_thinking": self.thinking}
        record = RequestRecord(self.calls, 0, body["max_tokens"])
        self.calls += 1
        await self._arrive()
        reply = await self._stream(body, record)
        if record.error is not None:
            status = record.error.split(":")[0]
            raise EndpointFailed(f"{self.base_url}: {record.error}", transient=not status.startswith("HTTP 4")
                                 or status == "HTTP 429")
        message = reply.message()
        usage = ModelUsage(input_tokens=record.prompt_tokens, output_tokens=record.output_tokens,
                           total_tokens=record.prompt_tokens + record.output_tokens)
        reason = STOP.get(reply.finish_reason or "", "unknown")
        return ModelOutput(model=self.model_name, choices=[ChatCompletionChoice(message=message, stop_reason=reason)],
                           usage=usage, metadata={"k3_timing": record.to_dict()})

    async def _arrive(self) -> None:
        """With a rate, wait for this call's arrival: the next of a Poisson process started at the first call."""
        if not self.rate:
            return
        now = time.perf_counter()
        self.next_arrival = (self.next_arrival if self.next_arrival is not None else now) + \
            self.arrivals.expovariate(self.rate)
        if self.next_arrival > now:
            await asyncio.sleep(self.next_arrival - now)

    async def _stream(self, body: dict, record: RequestRecord) -> Reply:
        reply = Reply()
        record.start = time.perf_counter()
        try:
            async with self.http.stream("POST", self.base_url.rstrip("/") + "/chat/completions", json=body) as r:
                if r.status_code != 200:
                    record.error = f"HTTP {r.status_code}: {(await r.aread()).decode(errors='replace')[:300]}"
                    return reply
                async for line in r.aiter_lines():
                    if line.startswith("data:") and reply.feed(line[5:].strip(), record, time.perf_counter()):
                        break
        except httpx.HTTPError as e:
            record.error = f"{type(e).__name__}: {e}"
        if record.error is None and not reply.done:    # a connection that dropped mid-answer is no answer
            record.error = "the stream ended without [DONE]: the connection dropped before the answer was complete"
        return reply


def timing_of(output: ModelOutput | None) -> dict | None:
    """The call's record (RequestRecord.to_dict()), from an output this provider made."""
    meta = getattr(output, "metadata", None) or {}
    value = meta.get("k3_timing")
    return value if isinstance(value, dict) else (json.loads(value) if isinstance(value, str) else None)
