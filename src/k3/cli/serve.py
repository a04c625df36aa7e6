"""k3 serve [MODEL] [--host 127.0.0.1] [--port 8000] [--api-key KEY] [--max-num-seqs N] [--max-queued N] ...
(vLLM's shape: the model positional, or --model)"""

from __future__ import annotations

import sys
from pathlib import Path

from k3.cli.engine_args import add_engine_arguments, engine_config
from k3.cli.vision_args import add_image_limit_arguments, add_image_work_arguments, image_work


def add_arguments(p) -> None:
    p.add_argument("model_path", nargs="?", metavar="MODEL", help="checkpoint directory (as `vllm serve MODEL`)")
    p.add_argument("--model", help="checkpoint directory (default: the bundled prose model)")
    p.add_argument("--host", default="127.0.0.1", help="bind address (loopback by default)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--api-key", help="require Authorization: Bearer KEY on /v1 routes")
    p.add_argument("--tokenizer", help="directory with tiktoken.model (default: the checkpoint's own)")
    p.add_argument("--max-queued", type=int, default=64, help="waiting requests before 429")
    p.add_argument("--served-model-name", help="model id in the API (default: the folder name)")
    p.add_argument("--request-timeout", type=float, default=600.0, help="seconds before a request fails with 504")
    p.add_argument("--public-metrics", action="store_true", help="with --api-key, let /metrics answer without the key")
    p.add_argument("--shutdown-timeout", type=float, default=30.0,
                   help="on SIGTERM, seconds requests in flight get to finish before they are cut")
    add_image_limit_arguments(p)
    add_image_work_arguments(p)
    add_engine_arguments(p)


DEFAULT_MAX_MODEL_LEN = 131_072   # past this a CPU prefill takes hours; ask for more with --max-model-len


def bind(host: str, port: int):
    """The listening socket, bound before the model loads so a port in use is reported at once."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise ValueError(f"cannot listen on {host}:{port} ({e.strerror}): another process has the port; pick a "
                         "free one with --port") from None
    return sock


def model_argument(args) -> str | None:
    if args.model_path and args.model and args.model_path != args.model:
        raise ValueError(f"two models given ({args.model_path} and --model {args.model}); give one")
    return args.model_path or args.model


def served_name(argument: str | None, path) -> str:
    """The model id in the API when --served-model-name is not given: a repo id as given (as vLLM
    does), "default" for the bundled model, else the checkpoint folder's name."""
    from k3.models import BUNDLED, is_repo_id

    if argument is None or argument == BUNDLED:
        return BUNDLED
    return argument if is_repo_id(argument) and not Path(argument).exists() else path.name


def _activity_log(engine):
    """Throughput lines on stderr every 10 s while the server has work (serve/activity_log.py)."""
    import logging

    from k3.serve.activity_log import ActivityLog, log

    if not log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("INFO:     k3: %(message)s"))   # beside uvicorn's own lines
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        log.propagate = False
    return ActivityLog(engine).start()


def run(args) -> int:
    from k3.cli.target import check_tokenizer
    from k3.models import resolve_model
    from k3.engine import LLM
    from k3.engine.thread import EngineThread
    from k3.serve.app import Server, run as serve
    from k3.serve.async_engine import AsyncEngine

    path = resolve_model(model_argument(args))
    check_tokenizer(path, args.tokenizer, "the server")
    config = engine_config(args)   # every engine flag checked before the port is taken or the model loads
    work = image_work(args)
    sock = bind(args.host, args.port)
    thread = EngineThread()    # the model is built where it will be stepped (engine/thread.py says why)
    llm = thread.call(LLM, str(path), config, tokenizer=args.tokenizer)
    engine = AsyncEngine(llm.engine, max_queued=args.max_queued, thread=thread)
    served_len = args.max_model_len or min(llm.engine.max_model_len, DEFAULT_MAX_MODEL_LEN)
    server = Server(engine, llm.tokenizer, args.served_model_name or served_name(model_argument(args), path), args.api_key, args.request_timeout,
                    max_model_len=served_len, public_metrics=args.public_metrics, media=llm.media,
                    image_limits=llm.image_limits, allowed_local_media_path=args.allowed_local_media_path,
                    image_work=work)
    print(f"k3 serve: {server.model_name} on http://{args.host}:{args.port} (max_model_len "
          f"{server.max_model_len:,})", file=sys.stderr, flush=True)
    activity = _activity_log(engine)
    healthy = serve(server, sock, args.shutdown_timeout)
    activity.stop()
    engine.shutdown()
    if not healthy:
        print(f"k3 serve: stopped because the engine did: {engine.dead}", file=sys.stderr)
        return 1
    if not engine.running:  # the engine is ours again: keep its prefix snapshots on disk
        llm.engine.close()
    return 0
