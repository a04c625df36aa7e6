"""k3 bench (--model PATH | --endpoint URL) [--workload fixed|context-sweep|shared-prefix|multi-turn] ..."""

from __future__ import annotations

import json
import sys


def add_arguments(p) -> None:
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--model", help="checkpoint directory: benchmark the in-process k3 engine")
    target.add_argument("--endpoint", help="OpenAI-compatible base URL (k3 serve, vLLM, SGLang, llama.cpp ...)")
    p.add_argument("--api", choices=["chat", "completions"], default="chat", help="endpoint API (default chat)")
    p.add_argument("--api-key")
    p.add_argument("--served-model-name", help="model id to request (default: the first of /v1/models)")
    p.add_argument("--workload", default="fixed", choices=["fixed", "context-sweep", "shared-prefix", "multi-turn"])
    p.add_argument("--dataset", help="JSONL of requests ({prompt|prompt_ids|messages, max_tokens})")
    p.add_argument("--num-prompts", type=int, default=32)
    p.add_argument("--input-len", type=int, default=256)
    p.add_argument("--output-len", type=int, default=64)
    p.add_argument("--contexts", default="1024,4096,16384,65536", help="context-sweep lengths")
    p.add_argument("--per-context", type=int, default=2, help="context-sweep requests per length")
    p.add_argument("--prefix-len", type=int, default=128, help="shared-prefix length")
    p.add_argument("--turns", type=int, default=4, help="multi-turn turns per conversation")
    p.add_argument("--concurrency", "--max-concurrency", type=int, default=None, help="requests in flight at most")
    p.add_argument("--request-rate", type=float, default=float("inf"), help="Poisson arrivals per second")
    p.add_argument("--warmup", type=int, default=1, help="requests sent first and not counted")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--goodput", nargs="*", metavar="NAME:MS", help="SLOs, e.g. ttft:500 tpot:50")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per request before it counts as failed")
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--no-ignore-eos", dest="ignore_eos", action="store_false",
                   help="let requests stop at EOS (default: generate exactly --output-len)")
    p.add_argument("--memory-budget", help="local: weights + cache budget; experts beyond it stream")
    p.add_argument("--cache-memory", default="1GiB", help="local: sequence-state cache")
    p.add_argument("--max-num-seqs", type=int, default=8, help="local: sequences decoded together")
    p.add_argument("--save", metavar="FILE.json", help="write the result and every request's record")
    p.add_argument("--plot", metavar="FILE.png", help="latency histograms (and TPOT vs context)")


def run(args) -> int:
    from k3.bench.main import build_workload, parse_goodput, run_bench
    from k3.bench.report import format_table, plot, save_records
    from k3.tools.progress import count_progress

    parse_goodput(args.goodput)
    if args.model:
        from k3.bench.local_client import LocalClient

        client = LocalClient(args.model, memory_budget=args.memory_budget, cache_memory=args.cache_memory,
                             max_num_seqs=args.max_num_seqs, ignore_eos=args.ignore_eos, temperature=args.temperature)
        vocab = client.vocab_size
    else:
        from k3.bench.openai_client import OpenAIClient

        client = OpenAIClient(args.endpoint, args.api, args.api_key, args.served_model_name, args.timeout,
                              args.ignore_eos, args.temperature)
        vocab = 32000  # token-id prompts go to completion endpoints only; their ids stay below common vocabularies
    prompts = build_workload(args, vocab)
    with count_progress("requests", len(prompts)) as tick:
        result, records = run_bench(client, prompts, args, tick)
    print(format_table(result), file=sys.stderr)
    if args.save:
        save_records(args.save, result, records)
    if args.plot:
        plot(args.plot, result, records)
    print(json.dumps(result))
    return 0
