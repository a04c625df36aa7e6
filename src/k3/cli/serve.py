"""k3 serve [--model PATH] [--host 127.0.0.1] [--port 8000] [--api-key KEY] [--max-num-seqs N] [--max-queued N]"""

from __future__ import annotations


def add_arguments(p) -> None:
    p.add_argument("--model", help="checkpoint directory (default: the bundled prose model)")
    p.add_argument("--host", default="127.0.0.1", help="bind address (loopback by default)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--api-key", help="require Authorization: Bearer KEY on /v1 routes")
    p.add_argument("--max-num-seqs", type=int, default=8)
    p.add_argument("--max-queued", type=int, default=64, help="waiting requests before 429")
    p.add_argument("--served-model-name", help="model id in the API (default: the folder name)")
    p.add_argument("--cache-memory", default="1GiB")
    p.add_argument("--memory-budget", help="weights + cache within this (e.g. 24GB); experts that do not fit stream")
    p.add_argument("--request-timeout", type=float, default=600.0, help="seconds before a request fails with 504")


def run(args) -> int:
    from pathlib import Path

    from k3.defaults import default_model
    from k3.engine import LLM
    from k3.serve.app import Server, run as serve
    from k3.serve.async_engine import AsyncEngine

    path = Path(args.model) if args.model else default_model()
    llm = LLM(str(path), max_num_seqs=args.max_num_seqs, cache_memory=args.cache_memory,
              memory_budget=args.memory_budget)
    if llm.tokenizer is None:
        raise ValueError(f"{path} has no tiktoken.model: the server needs the tokenizer")
    engine = AsyncEngine(llm.engine, max_queued=args.max_queued)
    server = Server(engine, llm.tokenizer, args.served_model_name or path.name, args.api_key, args.request_timeout)
    serve(server, args.host, args.port)
    return 0
