"""k3 serve [MODEL] [--host 127.0.0.1] [--port 8000] [--api-key KEY] [--max-num-seqs N] [--max-queued N] ...
(vLLM's shape: the model positional, or --model)"""

from __future__ import annotations


def add_arguments(p) -> None:
    p.add_argument("model_path", nargs="?", metavar="MODEL", help="checkpoint directory (as `vllm serve MODEL`)")
    p.add_argument("--model", help="checkpoint directory (default: the bundled prose model)")
    p.add_argument("--host", default="127.0.0.1", help="bind address (loopback by default)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--api-key", help="require Authorization: Bearer KEY on /v1 routes")
    p.add_argument("--max-num-seqs", type=int, default=8)
    p.add_argument("--max-num-batched-tokens", type=int, default=512, help="tokens per engine step")
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"],
                   help="compute dtype (auto: fp32 on a CPU, weights kept as stored)")
    p.add_argument("--device", default="cpu", help="torch device for the model and its state (e.g. cuda)")
    p.add_argument("--tokenizer", help="directory with tiktoken.model (default: the checkpoint's own)")
    p.add_argument("--max-queued", type=int, default=64, help="waiting requests before 429")
    p.add_argument("--served-model-name", help="model id in the API (default: the folder name)")
    p.add_argument("--cache-memory", default="1GiB")
    p.add_argument("--memory-budget", help="weights + cache within this (e.g. 24GB); experts that do not fit stream")
    p.add_argument("--request-timeout", type=float, default=600.0, help="seconds before a request fails with 504")


def torch_dtype(name: str):
    """--dtype: auto (None: weights as stored, fp32 compute on a CPU) or a torch floating dtype."""
    import torch

    return None if name == "auto" else getattr(torch, name)


def model_argument(args) -> str | None:
    if args.model_path and args.model and args.model_path != args.model:
        raise ValueError(f"two models given ({args.model_path} and --model {args.model}); give one")
    return args.model_path or args.model


def run(args) -> int:
    from pathlib import Path

    from k3.cli.target import check_tokenizer
    from k3.defaults import default_model
    from k3.engine import LLM
    from k3.serve.app import Server, run as serve
    from k3.serve.async_engine import AsyncEngine

    path = Path(model_argument(args)) if model_argument(args) else default_model()
    check_tokenizer(path, args.tokenizer, "the server")
    llm = LLM(str(path), dtype=torch_dtype(args.dtype), device=args.device, max_num_seqs=args.max_num_seqs,
              max_num_batched_tokens=args.max_num_batched_tokens, cache_memory=args.cache_memory,
              memory_budget=args.memory_budget, tokenizer=args.tokenizer)
    engine = AsyncEngine(llm.engine, max_queued=args.max_queued)
    server = Server(engine, llm.tokenizer, args.served_model_name or path.name, args.api_key, args.request_timeout)
    serve(server, args.host, args.port)
    return 0
