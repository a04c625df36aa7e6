"""A local k3 checkpoint as an eval backend: chat through `LLM.chat` (K3's XTML format, reasoning and
tool calls parsed), raw completions through `LLM.generate`, and exact log-likelihoods from the model's
logits."""

from __future__ import annotations

from pathlib import Path

import torch

from k3.eval.backends.base import BackendError, Completion


class LocalBackend:
    def __init__(self, path: str | Path, *, window: int = 2048, **llm_kwargs):
        from k3 import LLM
        from k3.engine.request import SamplingParams

        self.path = Path(path)
        self.llm = LLM(str(path), **llm_kwargs)
        if self.llm.tokenizer is None:
            raise BackendError(f"{path}: no tokenizer (tiktoken.model) next to the checkpoint; k3 eval needs one")
        self.window = window
        self._params = SamplingParams

    def identity(self) -> dict:
        return {"kind": "local", "model": self.path.resolve().name, "path": str(self.path.resolve()),
                "fingerprint": self.llm.engine.fingerprint}

    def chat(self, messages, *, tools=None, max_tokens, temperature, seed) -> Completion:
        params = self._params(max_tokens=max_tokens, temperature=temperature, seed=seed)
        out = self.llm.chat(messages, params, tools=tools)[0]
        msg = out.message
        calls = [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in msg.tool_calls]
        return Completion(msg.content, msg.reasoning_content, calls, out.output.finish_reason,
                          len(out.output.prompt_token_ids), len(out.output.token_ids))

    def complete(self, prompt, *, max_tokens, temperature, seed, stop) -> Completion:
        """Tokenized as k3 serve's /v1/completions does (special names are their ids)."""
        ids = self.llm.tokenizer.encode(prompt, special=True)
        params = self._params(max_tokens=max_tokens, temperature=temperature, seed=seed, stop=tuple(stop))
        out = self.llm.generate([ids], params)[0]
        if out.finish_reason == "error":
            raise BackendError(f"generation failed: {out.error}")
        return Completion(out.text or "", "", [], out.finish_reason, len(ids), len(out.token_ids))

    @torch.no_grad()
    def _token_logprobs(self, ids: list[int]) -> torch.Tensor:
        """log p(ids[i] | ids[:i]) for i >= 1 -> [len(ids) - 1], in windows of `self.window` tokens."""
        model = self.llm.model
        out = []
        for start in range(0, len(ids) - 1, self.window):
            # Each window sees up to `window` earlier tokens as context (a sliding, overlapping window).
            ctx_start = max(0, start - self.window)
            chunk = ids[ctx_start:start + self.window + 1]
            logits = model(torch.tensor([chunk[:-1]])).float()[0]
            lp = torch.log_softmax(logits, -1).gather(-1, torch.tensor(chunk[1:]).unsqueeze(-1))[:, 0]
            out.append(lp[start - ctx_start:])
        return torch.cat(out) if out else torch.zeros(0)

    def loglikelihood(self, context: str, continuation: str) -> tuple[float, int]:
        tok = self.llm.tokenizer
        ctx, cont = tok.encode(context), tok.encode(continuation)  # apart, so the boundary is exact
        ids = ctx + cont
        if not ctx:  # nothing to condition the first token on: score from the second token
            return float(self._token_logprobs(ids).sum()), max(0, len(cont) - 1)
        return float(self._token_logprobs(ids)[len(ctx) - 1:].sum()), len(cont)

    def loglikelihood_rolling(self, text: str) -> tuple[float, int]:
        ids = self.llm.tokenizer.encode(text)
        lp = self._token_logprobs(ids)
        return float(lp.sum()), int(lp.numel())
