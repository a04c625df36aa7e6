"""build_app(server) -> FastAPI app with OpenAI-compatible routes; `run()` serves it with uvicorn.

Errors use OpenAI's shape. User errors are 4xx (400 invalid, 401 key, 404 unknown model or path,
413 body too large, 429 queue full with Retry-After) and never 500; the server keeps serving.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.exceptions import HTTPException as StarletteHTTPException

from k3.chat.images import image_sources
from k3.config.vision import MediaConfig
from k3.engine.image_prompts import prepare_all
from k3.media import ImageError, ImageLimits
from k3.serve import chat_route, completion_route, responses_route
from k3.serve.responses_route import ResponsesRequest
from k3.serve.info import install_info
from k3.serve.async_engine import AdmissionFailed, EngineUnavailable, QueueFull
from k3.serve.engine_client import EngineClient
from k3.serve.guard import MAX_BODY_BYTES, MAX_BODY_BYTES_WITH_IMAGES, Guard
from k3.serve.image_work import ImageWork
from k3.serve.protocol import (ChatRequest, ClientGone, CompletionRequest, DetokenizeRequest, RequestError, TokenizeRequest,
                               error_response)

STATIC = Path(__file__).parent / "static"


class Server:
    def __init__(self, engine: EngineClient, tokenizer, model_name: str, api_key: str | None = None,
                 request_timeout: float = 600.0, max_model_len: int | None = None, public_metrics: bool = False,
                 media: MediaConfig | None = None, image_limits: ImageLimits | None = None,
                 allowed_local_media_path: str | None = None, image_work: ImageWork | None = None):
        """max_model_len: prompt + completion tokens one request may use (default: the engine's).
        public_metrics: /metrics answers without the API key (for a scraper that cannot send one).
        media, image_limits: the checkpoint's image preprocessing and the limits on a request's images;
        allowed_local_media_path: a directory requests may name image files in (None: data: URLs only);
        image_work: where images are prepared (image_work.py; default one thread, four waiting)."""
        self.engine, self.tokenizer, self.model_name, self.api_key = engine, tokenizer, model_name, api_key
        self.request_timeout, self.public_metrics = request_timeout, public_metrics
        self.max_model_len = max_model_len or engine.max_model_len
        self.metrics = engine.metrics
        self.media, self.image_limits = media or MediaConfig(), image_limits or ImageLimits()
        self.allowed_local_media_path = allowed_local_media_path
        self.image_work = image_work or ImageWork()
        # images come inline
        self.max_request_bytes = MAX_BODY_BYTES_WITH_IMAGES if engine.has_vision else MAX_BODY_BYTES

    async def images(self, messages) -> list | None:
        """The request's images, prepared in the image pool (a 429 when it is saturated); None without any."""
        if not image_sources(messages):
            return None
        return await self.image_work.run(self.prepare_images, messages)

    def prepare_images(self, messages) -> list | None:
        """The request's images, prepared (None when it has none); a 400 naming the image and the problem."""
        sources = image_sources(messages)
        if not sources:
            return None
        if not self.engine.has_vision:
            raise RequestError("this model takes text only (its checkpoint has no vision tower, or the server was "
                               "started with --no-vision): send text", "messages")
        try:
            images = prepare_all(sources, self.media, self.image_limits, local_root=self.allowed_local_media_path,
                                 trusted=False)
        except ImageError as e:
            raise RequestError(str(e), "messages") from None
        # Through the tower here, in the image pool (its threads' lower priority goes to the tower's own threads,
        # which they start), so the engine's thread only places the rows: a large image's tower pass (seconds)
        # no longer holds every text request's steps.
        return self.engine.encode_images(images)

    def tokenizer_info(self) -> dict:
        names = {i: n for n, i in self.tokenizer.specials.items()}
        config = self.engine.model_config
        token = {key: names.get(getattr(config, f"{key}_id", None)) for key in ("bos_token", "eos_token", "pad_token")}
        return {"tokenizer_class": "K3Tokenizer", **token, "model_max_length": self.max_model_len,
                "vocab_size": config.vocab_size, "tokenizer_vocab_size": self.tokenizer.vocab_size,   # logits' width
                "chat_template": None,
                "chat_template_kwargs": {"thinking": self.tokenizer.thinking}}   # the defaults a request overrides

    async def run_all(self, ids: list[int], params: list, request: Request | None = None, ticket=None,
                      images: list | None = None) -> list:
        """Every choice's final output, admitted all together or not at all (`ticket`: places reserved for them
        with others; else reserved here). A client that disconnects aborts them all (ClientGone), and a
        choice that fails takes its siblings with it: nothing generates for nobody."""
        own = ticket is None
        ticket = ticket or self.engine.reserve(len(params))

        async def one(p):
            last = None
            async for out in self.engine.generate(ids, p, ticket=ticket, images=images):
                last = out
            if last.finish_reason == "error":
                raise HTTPException(500, f"generation failed: {last.error}")
            return last

        try:
            return await self.all_choices([one(p) for p in params], request)
        finally:
            if own:
                ticket.close()

    async def all_choices(self, coroutines: list, request: Request | None) -> list:
        """The results of `coroutines` (a request's choices), within the request timeout; a client that leaves
        (ClientGone) or one that fails cancels them all."""
        tasks = [asyncio.ensure_future(c) for c in coroutines]

        async def gathered():
            try:
                return await asyncio.gather(*tasks)
            finally:
                for t in tasks:       # a failed (or abandoned) choice takes its siblings with it
                    t.cancel()
        work = asyncio.ensure_future(asyncio.wait_for(gathered(), self.request_timeout))
        watch = asyncio.ensure_future(_disconnected(request)) if request is not None else None
        try:
            await asyncio.wait([t for t in (work, watch) if t is not None], return_when=asyncio.FIRST_COMPLETED)
            if not work.done():
                work.cancel()
                raise ClientGone()
            return work.result()
        except asyncio.TimeoutError:
            raise HTTPException(504, f"request took longer than {self.request_timeout:g} s; raise --request-timeout "
                                "or lower max_tokens") from None
        finally:
            if watch is not None:
                watch.cancel()

    def check_length(self, prompt_len: int, max_tokens: int | None, param: str = "messages") -> int:
        """The completion budget for a prompt of `prompt_len` tokens; a 400 when it cannot fit."""
        room = self.max_model_len - prompt_len
        if room < 1:
            raise RequestError(f"this model's maximum context length is {self.max_model_len:,} tokens; the prompt "
                               f"has {prompt_len:,} (shorten it, or start the server with a larger --max-model-len)",
                               param)
        if max_tokens is not None and max_tokens > room:
            raise RequestError(f"this model's maximum context length is {self.max_model_len:,} tokens; you asked for "
                               f"{prompt_len + max_tokens:,} ({prompt_len:,} in the prompt, {max_tokens:,} in the "
                               "completion): lower max_tokens", "max_tokens")
        return room

    def check_text_size(self, text_bytes: int, param: str = "messages") -> None:
        """Refuse, before tokenizing, text too long to fit however it tokenizes."""
        most = self.max_model_len * self.tokenizer.max_token_bytes
        if text_bytes > most:
            raise RequestError(f"the prompt's {text_bytes:,} bytes cannot fit in this model's maximum context length "
                               f"of {self.max_model_len:,} tokens", param)

    def check_model(self, name: str | None) -> None:
        if name is not None and name != self.model_name:
            raise HTTPException(404, f"model {name!r} not found; this server serves {self.model_name!r}")


async def _disconnected(request: Request) -> None:
    while not await request.is_disconnected():
        await asyncio.sleep(0.2)


def build_app(server: Server) -> FastAPI:
    app = FastAPI(title="k3", docs_url=None, redoc_url=None)
    _install_guards(app, server)
    _install_errors(app)
    install_info(app, server)

    @app.get("/", include_in_schema=False)
    async def page():
        return FileResponse(STATIC / "index.html", media_type="text/html")

    @app.get("/health")
    async def health():
        if server.engine.dead is not None or not server.engine.running:
            return error_response(503, f"the engine has stopped: {server.engine.dead or 'its thread ended'}; "
                                  "the server is shutting down (see its log)")
        return {"status": "ok", "in_flight": server.engine.in_flight}

    @app.get("/metrics")
    async def metrics():
        return Response(server.metrics.render(server.engine.stats()), media_type=CONTENT_TYPE_LATEST)

    @app.post("/v1/chat/completions")
    async def chat(req: ChatRequest, request: Request):
        server.check_model(req.model)
        if req.stream:
            return StreamingResponse(await chat_route.stream(server, req, request), media_type="text/event-stream")
        return await chat_route.complete(server, req, request)

    @app.post("/v1/responses")
    async def responses(req: ResponsesRequest, request: Request):
        server.check_model(req.model)
        if req.stream:
            return StreamingResponse(await responses_route.stream(server, req, request), media_type="text/event-stream")
        return await responses_route.create(server, req, request)

    @app.post("/v1/completions")
    async def completions(req: CompletionRequest, request: Request):
        server.check_model(req.model)
        if req.stream:
            return StreamingResponse(await completion_route.stream(server, req, request), media_type="text/event-stream")
        return await completion_route.complete(server, req, request)

    @app.post("/tokenize")
    async def tokenize(req: TokenizeRequest):
        """As /v1/completions tokenizes a prompt: special names (`[EOS]`) are their ids, as in vLLM, whose
        add_special_tokens adds a BOS; K3 adds none, so the flag is accepted and changes nothing."""
        images = await server.images(req.messages) if req.messages is not None else None
        ids = await asyncio.to_thread(_tokenize, server, req, images)   # off the loop: a large prompt stalls no one
        return {"tokens": ids, "count": len(ids), "max_model_len": server.max_model_len}

    @app.post("/detokenize")
    async def detokenize(req: DetokenizeRequest):
        return {"prompt": server.tokenizer.decode(req.tokens)}

    return app


def _tokenize(server: Server, req: TokenizeRequest, images: list | None = None) -> list[int]:
    if (req.prompt is None) == (req.messages is None):
        raise HTTPException(400, "give exactly one of prompt or messages")
    if req.prompt is not None:
        server.check_text_size(len(req.prompt.encode()), "prompt")
        return server.tokenizer.encode(req.prompt, special=True)
    chat = ChatRequest(model=server.model_name, messages=req.messages)
    return chat_route.prompt_ids(chat, server.tokenizer, server.check_text_size, images)[0]


def _install_guards(app: FastAPI, server: Server) -> None:
    app.add_middleware(Guard, server=server)


def _install_errors(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def invalid(request, exc: RequestValidationError):
        first = exc.errors()[0] if exc.errors() else {}
        param = ".".join(str(x) for x in first.get("loc", ())[1:]) or None
        return error_response(400, f"{param or 'body'}: {first.get('msg', 'invalid request')}", param)

    @app.exception_handler(StarletteHTTPException)
    async def http(request, exc: StarletteHTTPException):
        return error_response(exc.status_code, str(exc.detail))

    @app.exception_handler(AdmissionFailed)
    async def not_admitted(request, exc: AdmissionFailed):
        return error_response(500, str(exc))

    @app.exception_handler(EngineUnavailable)
    async def unavailable(request, exc: EngineUnavailable):
        return error_response(503, str(exc))

    @app.exception_handler(QueueFull)
    async def full(request, exc: QueueFull):
        return error_response(429, f"server busy: {exc}", headers={"Retry-After": "1"})

    @app.exception_handler(ValueError)
    async def bad_value(request, exc: ValueError):
        return error_response(400, str(exc), getattr(exc, "param", None))

    @app.exception_handler(ClientGone)
    async def gone(request, exc: ClientGone):
        return Response(status_code=499)     # nobody reads it; nginx's "client closed request"

    @app.exception_handler(json.JSONDecodeError)
    async def bad_json(request, exc):
        return error_response(400, "body is not valid JSON")

    @app.exception_handler(RecursionError)
    async def too_deep(request, exc):
        return error_response(400, "body is JSON nested too deeply")


def run(server: Server, sock, shutdown_timeout: float = 30.0) -> bool:
    """Serve on `sock`, a socket already bound (so a port in use is reported before the model loads).
    On SIGTERM, requests in flight get `shutdown_timeout` seconds to finish; then the rest are cut.
    Returns False when it stopped because the engine did (the caller exits non-zero)."""
    import uvicorn

    from k3.serve.connection import config

    uv = uvicorn.Server(config(build_app(server), shutdown_timeout))
    server.engine.on_stop(lambda reason: setattr(uv, "should_exit", True))
    uv.run(sockets=[sock])
    return server.engine.dead is None
