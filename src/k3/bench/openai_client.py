"""Streams one benchmark request from an OpenAI-compatible endpoint (k3, vLLM, SGLang, llama.cpp...)
and records when each token-bearing chunk arrived. Every failure becomes `record.error`: HTTP errors,
timeouts, malformed or unterminated streams are counted as failed requests, never raised."""

from __future__ import annotations

import json
import time

import httpx

from k3.bench.records import RequestRecord
from k3.bench.workloads import BenchPrompt


class OpenAIClient:
    def __init__(self, endpoint: str, api: str = "chat", api_key: str | None = None, model: str | None = None,
                 timeout: float = 600.0, ignore_eos: bool = False, temperature: float = 0.0):
        base = endpoint.rstrip("/")
        self.base = base if base.endswith("/v1") else base + "/v1"
        self.api, self.model, self.timeout = api, model, timeout
        self.extra = {"ignore_eos": True} if ignore_eos else {}
        self.temperature = temperature
        self.send_ids = True   # completions: token-id prompts, unless the server's vocabulary is unknown
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.http = httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(timeout, connect=10.0))

    async def prepare(self) -> None:
        if self.model is None:
            try:
                r = await self.http.get(self.base + "/models")
            except httpx.TransportError as e:   # nothing listening, DNS, refused, timed out
                raise ValueError(f"cannot connect to {self.base} ({type(e).__name__}: {e}); is the server "
                                 "running, and is --endpoint right?") from None
            try:
                r.raise_for_status()
                self.model = r.json()["data"][0]["id"]
            except (httpx.HTTPError, KeyError, IndexError, ValueError) as e:
                raise ValueError(f"cannot list models at {self.base}/models ({e}); pass --served-model-name") from None

    def vocab_size(self) -> int | None:
        """The server's vocabulary from its /tokenizer_info (k3 and vLLM serve one), or None."""
        try:
            r = httpx.get(self.base[:-len("/v1")] + "/tokenizer_info", headers=self.http.headers, timeout=10.0)
            r.raise_for_status()
            size = r.json().get("vocab_size")
        except (httpx.HTTPError, ValueError, AttributeError):
            return None
        return size if isinstance(size, int) and size > 0 else None

    def payload(self, p: BenchPrompt) -> dict:
        body = {"model": self.model, "max_tokens": p.max_tokens, "stream": True, "temperature": self.temperature,
                "stream_options": {"include_usage": True}} | self.extra
        if self.api == "chat":
            body["messages"] = p.messages or [{"role": "user", "content": p.text if p.text is not None else ""}]
        else:
            body["prompt"] = p.ids if p.ids is not None and self.send_ids else p.text
        return body

    async def send(self, p: BenchPrompt, record: RequestRecord) -> None:
        url = self.base + ("/chat/completions" if self.api == "chat" else "/completions")
        record.start = time.perf_counter()
        try:
            async with self.http.stream("POST", url, json=self.payload(p)) as r:
                if r.status_code != 200:
                    body = (await r.aread()).decode(errors="replace")[:200]
                    record.error = f"HTTP {r.status_code}: {body}"
                    return
                await self._read_stream(r, record)
        except httpx.TimeoutException:
            record.error = f"timeout after {self.timeout:g}s"
        except httpx.HTTPError as e:
            record.error = f"{type(e).__name__}: {e}"

    async def _read_stream(self, r: httpx.Response, record: RequestRecord) -> None:
        usage = None
        async for line in r.aiter_lines():
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                record.end = record.end or time.perf_counter()
                break
            try:
                chunk = json.loads(data)
                usage = chunk.get("usage") or usage
                self._on_chunk(chunk, record, time.perf_counter())
            except (ValueError, AttributeError, TypeError, KeyError, IndexError) as e:
                record.error = f"malformed stream chunk ({type(e).__name__}): {data[:80]!r}"
                return
        else:
            record.error = "stream ended without [DONE]"
            return
        if usage:
            record.output_tokens = usage.get("completion_tokens", record.output_tokens)
            record.prompt_tokens = usage.get("prompt_tokens", record.prompt_tokens)
            details = usage.get("completion_tokens_details") or {}
            record.reasoning_tokens = details.get("reasoning_tokens") or record.reasoning_tokens
        if record.first_token is None:
            record.error = "no tokens in the response"

    def _on_chunk(self, chunk: dict, record: RequestRecord, now: float) -> None:
        choices = chunk.get("choices") or []
        if not choices:
            return
        c = choices[0]
        if self.api == "chat":
            delta = c.get("delta") or {}
            visible = delta.get("content") or delta.get("tool_calls")
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        else:
            visible, reasoning = c.get("text"), None
        if visible or reasoning:
            record.token_chunk(now, bool(visible))

    async def close(self) -> None:
        await self.http.aclose()

    def local_stats(self) -> dict:
        return {}
