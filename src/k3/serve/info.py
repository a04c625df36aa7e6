"""What a client asks of `k3 serve` before it sends work: the model (with its weights' fingerprint and context),
the version and the machine the server runs on, the tokenizer."""

from __future__ import annotations

import asyncio

from fastapi import FastAPI

from k3 import __version__
from k3.config import identity
from k3.tools.machine import torch_facts


def install_info(app: FastAPI, server) -> None:
    """What a client asks before it sends work: the model, the version, the tokenizer."""
    described: dict = {}

    async def _identity() -> dict:
        if not described:      # git and /proc once: the answer does not change while the server runs
            described.update(await asyncio.to_thread(identity.describe))
            described["hardware"] |= await asyncio.to_thread(torch_facts)
        return described | {"version": __version__}

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [await _model_card(server)]}

    @app.get("/v1/models/{model_id:path}")
    async def model(model_id: str):
        """OpenAI's retrieve (`client.models.retrieve(id)`); ids may hold a slash (moonshotai/Kimi-K3)."""
        server.check_model(model_id)
        return await _model_card(server)

    @app.get("/version")
    async def version():
        """k3's version, and what the server runs on (an endpoint's evaluation report names the server's machine)."""
        return await _identity()

    @app.get("/tokenizer_info")
    async def tokenizer_info():
        """vLLM's: what a client tokenizing on its own side needs (lm-eval's remote tokenizer reads it)."""
        return server.tokenizer_info()


async def _model_card(server) -> dict:
    # The weights' fingerprint (engine.fingerprint): an evaluation refuses a judge serving the same weights.
    fingerprint = await asyncio.to_thread(server.engine.fingerprint)
    return {"id": server.model_name, "object": "model", "owned_by": "k3", "created": 0, "fingerprint": fingerprint,
            "max_model_len": server.max_model_len}
