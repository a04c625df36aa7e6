"""An OpenAI-compatible endpoint (k3 serve, vLLM, SGLang, llama.cpp, a hosted API) as an eval backend.

Chat turns go to /v1/chat/completions (not streamed); `reasoning_content` (or `reasoning`) is kept
apart from the answer. Raw completions (gen rows in completion mode) go to /v1/completions.
Log-likelihoods use /v1/completions with `echo` and `logprobs` (prompt tokens scored, `text_offset`
locating them), which k3 serve, vLLM and SGLang support; an endpoint that returns no prompt logprobs
raises `LoglikUnsupported` with the fix.
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

    def _generate(self, path: str, body: dict, seed: int | None, field: str) -> tuple[dict, dict, dict]:
        """POST a generation -> (choices[0], choices[0][field], usage); seed sent when given."""
        body = {"model": self.model, **body} | ({"seed": seed} if seed is not None else {})
        data = self._request("POST", path, body)
        try:
            choice = data["choices"][0]
            return choice, choice[field], data.get("usage") or {}
        except (KeyError, IndexError, TypeError):
            raise BackendError(f"{path} answered without choices[0].{field}: {str(data)[:200]}") from None

    def chat(self, messages, *, tools=None, max_tokens, temperature, seed) -> Completion:
        body = {"messages": messages, "max_tokens": max_tokens, "temperature": temperature} | ({"tools": tools} if tools else {})
        choice, msg, usage = self._generate("/chat/completions", body, seed, "message")
        calls = [{"id": c.get("id", f"call_{i}"), "name": c.get("function", {}).get("name", ""),
                  "arguments": c.get("function", {}).get("arguments", "")} for i, c in enumerate(msg.get("tool_calls") or [])]
        return Completion(msg.get("content") or "", msg.get("reasoning_content") or msg.get("reasoning") or "", calls,
                          choice.get("finish_reason"), *_token_counts(usage))

    def complete(self, prompt, *, max_tokens, temperature, seed, stop) -> Completion:
        body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": temperature} | ({"stop": list(stop)} if stop else {})
        choice, text, usage = self._generate("/completions", body, seed, "text")
        return Completion(text or "", "", [], choice.get("finish_reason"), *_token_counts(usage))

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


def _token_counts(usage: dict) -> tuple[int, int]:
    return int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)
