"""build_app(server) -> FastAPI app with OpenAI-compatible routes; `run()` serves it with uvicorn.

Errors use OpenAI's shape. User errors are 4xx (400 invalid, 401 key, 404 unknown model or path,
413 body too large, 429 queue full with Retry-After) and never 500; the server keeps serving.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hmac
import json
import time
import uuid
from pathlib import Path

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.exceptions import HTTPException as StarletteHTTPException

from k3.serve import chat_route
from k3.serve.async_engine import AsyncEngine, QueueFull
from k3.serve.metrics import Metrics
from k3.serve.protocol import ChatRequest, CompletionRequest, DetokenizeRequest, TokenizeRequest, error_body

MAX_BODY_BYTES = 4 * 2 ** 20
STATIC = Path(__file__).parent / "static"
KNOWN_PATHS = ("/v1/chat/completions", "/v1/completions", "/v1/models", "/health", "/metrics", "/tokenize",
               "/detokenize", "/")


class Server:
    def __init__(self, engine: AsyncEngine, tokenizer, model_name: str, api_key: str | None = None,
                 request_timeout: float = 600.0):
        self.engine, self.tokenizer, self.model_name, self.api_key = engine, tokenizer, model_name, api_key
        self.request_timeout = request_timeout
        self.metrics = engine.metrics = engine.metrics or Metrics()

    async def run_all(self, ids: list[int], params: list) -> list:
        async def one(p):
            last = None
            async for out in self.engine.generate(ids, p):
                last = out
            if last.finish_reason == "error":
                raise HTTPException(500, f"generation failed: {last.error}")
            return last
        try:
            return await asyncio.wait_for(asyncio.gather(*(one(p) for p in params)), self.request_timeout)
        except asyncio.TimeoutError:
            raise HTTPException(504, f"request took longer than {self.request_timeout:g} s; raise --request-timeout "
                                "or lower max_tokens") from None

    def check_model(self, name: str | None) -> None:
        if name is not None and name != self.model_name:
            raise HTTPException(404, f"model {name!r} not found; this server serves {self.model_name!r}")


def _error(status: int, message: str, param: str | None = None, headers: dict | None = None) -> JSONResponse:
    kind = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
            413: "invalid_request_error", 429: "rate_limit_error", 504: "timeout"}.get(status, "server_error")
    return JSONResponse(error_body(message, kind, status, param), status_code=status, headers=headers)


def build_app(server: Server) -> FastAPI:
    app = FastAPI(title="k3", docs_url=None, redoc_url=None)
    _install_guards(app, server)
    _install_errors(app)

    @app.get("/", include_in_schema=False)
    async def page():
        return FileResponse(STATIC / "index.html", media_type="text/html")

    @app.get("/health")
    async def health():
        return {"status": "ok", "in_flight": server.engine.in_flight}

    @app.get("/metrics")
    async def metrics():
        return Response(server.metrics.render(server.engine.engine.stats_snapshot()), media_type=CONTENT_TYPE_LATEST)

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": server.model_name, "object": "model", "owned_by": "k3",
                                             "created": 0}]}

    @app.post("/v1/chat/completions")
    async def chat(req: ChatRequest):
        server.check_model(req.model)
        if req.stream:
            return StreamingResponse(await chat_route.stream(server, req), media_type="text/event-stream")
        return await chat_route.complete(server, req)

    @app.post("/v1/completions")
    async def completions(req: CompletionRequest):
        server.check_model(req.model)
        return await _complete_text(server, req)

    @app.post("/tokenize")
    async def tokenize(req: TokenizeRequest):
        if (req.prompt is None) == (req.messages is None):
            raise HTTPException(400, "give exactly one of prompt or messages")
        ids = (server.tokenizer.encode(req.prompt, special=req.add_special_tokens) if req.prompt is not None
               else chat_route.prompt_ids(ChatRequest(model=server.model_name, messages=req.messages),
                                          server.tokenizer)[0])
        return {"tokens": ids, "count": len(ids), "max_model_len": None}

    @app.post("/detokenize")
    async def detokenize(req: DetokenizeRequest):
        return {"prompt": server.tokenizer.decode(req.tokens)}

    return app


async def _complete_text(server: Server, req: CompletionRequest) -> dict:
    prompt = req.prompt
    if isinstance(prompt, list) and prompt and not isinstance(prompt[0], int):
        raise HTTPException(400, "batched prompts are not supported; send one prompt per request")
    ids = server.tokenizer.encode(prompt, special=True) if isinstance(prompt, str) else list(prompt)
    params = [chat_route.sampling(req, i, logprobs=req.logprobs) for i in range(req.n)]
    if req.echo and req.logprobs is not None:  # score the prompt too (what lm-eval-style log-likelihoods use)
        params = [dataclasses.replace(p, prompt_logprobs=req.logprobs) for p in params]
    outs = await server.run_all(ids, params)
    prefix = server.tokenizer.decode(ids) if req.echo else ""
    choices = [{"index": i, "text": prefix + (o.text or ""), "finish_reason": o.finish_reason,
                "logprobs": _logprobs(server.tokenizer, o, req.echo) if req.logprobs is not None else None}
               for i, o in enumerate(outs)]
    completion = sum(len(o.token_ids) for o in outs)
    return {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": int(time.time()),
            "model": server.model_name, "choices": choices,
            "usage": {"prompt_tokens": len(ids), "completion_tokens": completion, "total_tokens": len(ids) + completion}}


def _logprobs(tokenizer, out, echo: bool = False) -> dict:
    """OpenAI completions `logprobs`; with echo, the prompt's tokens come first (the first one, which
    nothing predicts, with logprob None) and `text_offset` gives each token's start in the text."""
    ids = ([*out.prompt_token_ids] if echo else []) + [lp.token_id for lp in out.logprobs]
    scored = (list(out.prompt_logprobs) if echo else []) + list(out.logprobs)
    tokens = [tokenizer.decode([t]) for t in ids]
    offsets, pos = [], 0
    for t in tokens:
        offsets.append(pos)
        pos += len(t)
    return {"tokens": tokens, "token_logprobs": [lp.logprob if lp else None for lp in scored],
            "top_logprobs": [{tokenizer.decode([t]): v for t, v in lp.top.items()} if lp else None for lp in scored],
            "text_offset": offsets}


def _install_guards(app: FastAPI, server: Server) -> None:
    @app.middleware("http")
    async def guard(request: Request, call_next):
        size = request.headers.get("content-length")
        if size is not None and size.isdigit() and int(size) > MAX_BODY_BYTES:
            return _error(413, f"request body over {MAX_BODY_BYTES} bytes")
        if server.api_key and request.url.path.startswith("/v1"):
            given = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
            if not hmac.compare_digest(given.encode(), server.api_key.encode()):
                return _error(401, "missing or wrong API key (send Authorization: Bearer KEY)")
        response = await call_next(request)
        path = request.url.path if request.url.path in KNOWN_PATHS else "other"
        server.metrics.requests.labels(path, str(response.status_code)).inc()
        return response


def _install_errors(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def invalid(request, exc: RequestValidationError):
        first = exc.errors()[0] if exc.errors() else {}
        param = ".".join(str(x) for x in first.get("loc", ())[1:]) or None
        return _error(400, f"{param or 'body'}: {first.get('msg', 'invalid request')}", param)

    @app.exception_handler(StarletteHTTPException)
    async def http(request, exc: StarletteHTTPException):
        return _error(exc.status_code, str(exc.detail))

    @app.exception_handler(QueueFull)
    async def full(request, exc: QueueFull):
        return _error(429, f"server busy: {exc}", headers={"Retry-After": "1"})

    @app.exception_handler(ValueError)
    async def bad_value(request, exc: ValueError):
        return _error(400, str(exc))

    @app.exception_handler(json.JSONDecodeError)
    async def bad_json(request, exc):
        return _error(400, "body is not valid JSON")


def run(server: Server, host: str = "127.0.0.1", port: int = 8000) -> None:
    import uvicorn

    uvicorn.run(build_app(server), host=host, port=port, log_level="info")
