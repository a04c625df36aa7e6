"""Token counts of a chat prompt as the model under test sees it: through k3's own tokenizer and chat format
in-process, through the endpoint's /tokenize where it has one (k3 serve and vLLM do; the count includes
the chat template), else estimated at four characters a token (and said so)."""

from __future__ import annotations

import asyncio

import httpx

CHARS_PER_TOKEN = 4


class Measure:
    def __init__(self, model):
        # k3's own provider (model_api.py; @modelapi wraps the class, so it is known by what it can do)
        self.local = model.api if hasattr(model.api, "count_chat_tokens") else None
        base = getattr(model.api, "base_url", None)
        self.root = base.rstrip("/").removesuffix("/v1") if base and not self.local else None
        self.api_key = getattr(model.api, "api_key", None)
        self.source = "k3 tokenizer" if self.local else None
        self.context: int | None = self.local.llm.engine.max_model_len if self.local else None

    async def tokens(self, messages: list[dict]) -> int:
        if self.local is not None:
            return await asyncio.to_thread(self.local.count_chat_tokens, messages)
        if self.root is not None and self.source != "estimate":
            count = await self._served(messages)
            if count is not None:
                self.source = "endpoint /tokenize"
                return count
        self.source = "estimate"
        return sum(len(m["content"]) for m in messages) // CHARS_PER_TOKEN

    async def _served(self, messages: list[dict]) -> int | None:
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        try:
            async with httpx.AsyncClient(timeout=120) as client:
                r = await client.post(self.root + "/tokenize", json={"messages": messages}, headers=headers)
            body = r.json()
        except (httpx.HTTPError, ValueError):
            return None
        if r.status_code != 200 or not isinstance(body, dict) or not isinstance(body.get("count"), int):
            return None
        if isinstance(body.get("max_model_len"), int):
            self.context = body["max_model_len"]
        return body["count"]
