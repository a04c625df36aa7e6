"""k3 bench (--model PATH | --endpoint URL | --base-url URL [--endpoint /v1/completions])
[--workload fixed|context-sweep|shared-prefix|multi-turn] [--dataset-name random|jsonl --dataset-path F]
[--save-result [--result-dir D] [--result-filename F]] ...  (vLLM's `bench serve` names where they overlap)"""

from __future__ import annotations

import json
import sys

from k3.cli.engine_args import add_engine_arguments, engine_config


def add_arguments(p) -> None:
    p.add_argument("--model", help="checkpoint directory: benchmark the in-process k3 engine")
    p.add_argument("--endpoint", help="OpenAI-compatible base URL (k3 serve, vLLM, SGLang, llama.cpp ...); with "
                                      "--base-url, the API path as in vLLM (/v1/completions, /v1/chat/completions)")
    p.add_argument("--base-url", help="server root, as vLLM's --base-url (http://host:8000)")
    p.add_argument("--api", choices=["chat", "completions"], default=None,
                   help="endpoint API (default chat; --endpoint PATH decides it when given)")
    p.add_argument("--api-key")
    p.add_argument("--served-model-name", help="model id to request (default: the first of /v1/models)")
    p.add_argument("--workload", default="fixed", choices=["fixed", "context-sweep", "shared-prefix", "multi-turn"])
    p.add_argument("--dataset", "--dataset-path", dest="dataset",
                   help="JSONL of requests ({prompt|prompt_ids|messages, max_tokens})")
    p.add_argument("--dataset-name", choices=["random", "jsonl"], default=None,
                   help="vLLM's name: random (the synthetic --workload) or jsonl (needs --dataset-path)")
    p.add_argument("--num-prompts", type=int, default=32)
    p.add_argument("--input-len", type=int, default=256)
    p.add_argument("--output-len", type=int, default=64)
    p.add_argument("--contexts", default="1024,4096,16384,65536", help="context-sweep lengths")
    p.add_argument("--per-context", type=int, default=2, help="context-sweep requests per length")
    p.add_argument("--prefix-len", type=int, default=128, help="shared-prefix length")
    p.add_argument("--turns", type=int, default=4, help="multi-turn turns per conversation")
    p.add_argument("--images-per-prompt", type=int, default=0,
                   help="synthetic workloads: send each prompt as a chat message with this many images")
    p.add_argument("--image-size", default="448x448", help="with --images-per-prompt: WIDTHxHEIGHT of each image")
    p.add_argument("--concurrency", "--max-concurrency", type=int, default=None, help="requests in flight at most")
    p.add_argument("--request-rate", type=float, default=float("inf"), help="Poisson arrivals per second")
    p.add_argument("--warmup", type=int, default=1, help="requests sent first and not counted")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--goodput", nargs="*", metavar="NAME:MS", help="SLOs, e.g. ttft:500 tpot:50")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per request before it counts as failed")
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--no-ignore-eos", dest="ignore_eos", action="store_false",
                   help="let requests stop at EOS (default: generate exactly --output-len)")
    p.add_argument("--save", metavar="FILE.json", help="write the result and every request's record")
    p.add_argument("--save-result", action="store_true", help="write the result JSON (vLLM's flat keys included)")
    p.add_argument("--result-dir", default=".", help="with --save-result: the directory (default .)")
    p.add_argument("--result-filename", help="with --save-result: the file name (default k3-RATEqps-MODEL-DATE.json)")
    p.add_argument("--json", action="store_true", help="also print the result as one JSON line (last on stdout)")
    p.add_argument("--plot", metavar="FILE.png", help="latency histograms (and TPOT vs context)")
    add_engine_arguments(p, local_only=True)


def endpoint_target(args) -> tuple[str | None, str]:
    """(base URL or None for --model, API): --endpoint URL, or vLLM's --base-url with --endpoint PATH."""
    given = [x for x in (args.model, args.base_url) if x] + ([args.endpoint] if args.endpoint and not
                                                             args.endpoint.startswith("/") else [])
    if len(given) != 1:
        raise ValueError("give one target: --model PATH, --endpoint URL, or --base-url URL [--endpoint /v1/...]")
    if args.endpoint and args.endpoint.startswith("/"):
        if not args.base_url:
            raise ValueError(f"--endpoint {args.endpoint} is a path: give the server with --base-url URL")
        if not args.endpoint.rstrip("/").endswith(("/completions", "/chat/completions")):
            raise ValueError(f"--endpoint {args.endpoint}: expected /v1/completions or /v1/chat/completions")
        api = "chat" if args.endpoint.rstrip("/").endswith("/chat/completions") else "completions"
        if args.api and args.api != api:
            raise ValueError(f"--api {args.api} contradicts --endpoint {args.endpoint}")
        return args.base_url, api
    return (None if args.model else args.base_url or args.endpoint), args.api or "chat"


def _has_images(messages) -> bool:
    return any(isinstance(m.get("content"), list) and any(isinstance(part, dict) and part.get("type") in
               ("image_url", "image") for part in m["content"]) for m in messages or [])


def run(args) -> int:
    from k3.bench.main import build_workload, parse_goodput, run_bench
    from k3.bench.report import format_table, plot, save_records, save_result
    from k3.tools.progress import count_progress

    parse_goodput(args.goodput)
    if args.plot:
        import matplotlib  # noqa: F401  (before the run, not after it: a missing extra is said at once)
    base, args.api = endpoint_target(args)
    if args.dataset_name == "jsonl" and not args.dataset:
        raise ValueError("--dataset-name jsonl needs --dataset-path FILE")
    if args.dataset_name == "random" and args.dataset:
        raise ValueError("--dataset-name random is synthetic: drop --dataset-path, or use --dataset-name jsonl")
    if args.model:
        from k3.bench.local_client import LocalClient

        client = LocalClient(args.model, engine_config(args), ignore_eos=args.ignore_eos, temperature=args.temperature)
        vocab = client.vocab_size
    else:
        from k3.bench.openai_client import OpenAIClient

        client = OpenAIClient(base, args.api, args.api_key, args.served_model_name, args.timeout,
                              args.ignore_eos, args.temperature)
        # Token-id prompts go to completion endpoints only, drawn below the server's vocabulary; a server
        # that does not say its vocabulary gets the same prompts as text.
        vocab = client.vocab_size() if args.api == "completions" else None
        client.send_ids = vocab is not None
        vocab = vocab or 32000
    prompts = build_workload(args, vocab)
    if any(_has_images(p.messages) for p in prompts) and args.api != "chat":
        raise ValueError("requests with images go to chat endpoints: use --api chat")
    with count_progress("requests", len(prompts)) as tick:
        result, records = run_bench(client, prompts, args, tick)
    from pathlib import Path

    result["model_id"] = Path(args.model).name if args.model else getattr(client, "model", None)
    print(format_table(result))
    if args.save:
        save_records(args.save, result, records)
    if args.save_result:
        print(f"result written to {save_result(args, result)}", file=sys.stderr)
    if args.plot:
        plot(args.plot, result, records)
    if args.json:
        print(json.dumps(result))
    if result["failed"] and not result["completed"]:    # a table of nothing is not a benchmark: say so, exit 1
        reasons = "; ".join(f"{n} x {why}" for why, n in result["failure_reasons"].items())
        print(f"k3 bench: every request failed ({reasons})", file=sys.stderr)
        return 1
    return 0
