"""An OpenAI-compatible endpoint (k3 serve, vLLM, SGLang, llama.cpp, a hosted API) as an eval backend.

Chat turns go to /v1/chat/completions (not streamed); `reasoning_content` (or `reasoning`) is kept
apart from the answer. Log-likelihoods use /v1/completions with `echo` and `logprobs` (prompt tokens
scored, `text_offset` locating them), which k3 serve, vLLM and SGLang support; an endpoint that
returns no prompt logprobs raises `LoglikUnsupported` with the fix.
"""

from __future__ import annotations

import httpx

from k3.eval.backends.base import BackendError, Completion, LoglikUnsupported


class OpenAIBackend:
    def __init__(self, endpoint: str, model: str | None = None, api_key: str | None = None, timeout: float = 600.0,
                 transport: httpx.BaseTransport | None = None):
        base = endpoint.rstrip("/")
        self.base = base if base.endswith("/v1") else base + "/v1"
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.http = httpx.Client(headers=headers, timeout=httpx.Timeout(timeout, connect=10.0), transport=transport)
        self.model = model or self._served_model()

    def _served_model(self) -> str:
        try:
            return self._request("GET", "/models")["data"][0]["id"]
        except (KeyError, IndexError, TypeError):
            raise BackendError(f"{self.base}/models lists no model; pass --model-name") from None

    def _request(self, method: str, path: str, body: dict | None = None) -> dict:
        try:
            r = self.http.request(method, self.base + path, json=body)
        except httpx.HTTPError as e:
            raise BackendError(f"{self.base}{path}: {type(e).__name__}: {e}") from None
        if r.status_code >= 400:
            raise BackendError(f"{self.base}{path}: HTTP {r.status_code}: {r.text[:300]}")
        try:
            return r.json()
        except ValueError:
            raise BackendError(f"{self.base}{path}: response is not JSON: {r.text[:200]!r}") from None

    def identity(self) -> dict:
        return {"kind": "endpoint", "url": self.base, "model": self.model}

    def chat(self, messages, *, tools=None, max_tokens, temperature, seed) -> Completion:
        body = {"model": self.model, "messages": messages, "max_tokens": max_tokens, "temperature": temperature}
        if seed is not None:
            body["seed"] = seed
        if tools:
            body["tools"] = tools
        data = self._request("POST", "/chat/completions", body)
        try:
            choice = data["choices"][0]
            msg = choice["message"]
        except (KeyError, IndexError, TypeError):
            raise BackendError(f"chat completion without choices[0].message: {str(data)[:200]}") from None
        calls = [{"id": c.get("id", f"call_{i}"), "name": c.get("function", {}).get("name", ""),
                  "arguments": c.get("function", {}).get("arguments", "")} for i, c in enumerate(msg.get("tool_calls") or [])]
        usage = data.get("usage") or {}
        return Completion(msg.get("content") or "", msg.get("reasoning_content") or msg.get("reasoning") or "", calls,
                          choice.get("finish_reason"), int(usage.get("prompt_tokens") or 0),
                          int(usage.get("completion_tokens") or 0))

    def _prompt_logprobs(self, text: str) -> tuple[list[float | None], list[int]]:
        body = {"model": self.model, "prompt": text, "max_tokens": 1, "echo": True, "logprobs": 1, "temperature": 0}
        data = self._request("POST", "/completions", body)
        try:
            lp = data["choices"][0]["logprobs"]
            return lp["token_logprobs"], lp["text_offset"]
        except (KeyError, IndexError, TypeError):
            raise LoglikUnsupported(
                f"{self.base} returned no prompt logprobs (completions with echo+logprobs); log-likelihood tasks "
                "(perplexity, mc) need a server that supports them (vLLM, SGLang) or --model PATH") from None

    def loglikelihood(self, context: str, continuation: str) -> tuple[float, int]:
        logprobs, offsets = self._prompt_logprobs(context + continuation)
        end = len(context) + len(continuation)
        picked = [lp for lp, off in zip(logprobs, offsets) if len(context) <= off < end and lp is not None]
        if not picked:
            raise LoglikUnsupported(f"{self.base}: no logprobs for the continuation {continuation[:40]!r}")
        return float(sum(picked)), len(picked)

    def loglikelihood_rolling(self, text: str) -> tuple[float, int]:
        logprobs, offsets = self._prompt_logprobs(text)
        picked = [lp for lp, off in zip(logprobs, offsets) if off < len(text) and lp is not None]
        return float(sum(picked)), len(picked)
