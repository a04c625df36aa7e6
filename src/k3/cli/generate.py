"""k3 generate [PROMPT] [--model PATH] (PROMPT | --prompt TEXT | --prompt-ids 1,2,3) [--max-tokens N]
[--temperature T] [--seed S]"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from k3.cli.engine_args import add_engine_arguments, engine_config


def add_arguments(p) -> None:
    p.add_argument("prompt_text", nargs="?", metavar="PROMPT",
                   help="prompt text (the same as --prompt); `-`, or none with input piped in: read from stdin")
    p.add_argument("--model", help="checkpoint directory, downloaded repo id, or `default` (the bundled model "
                                   "trained on English prose; the default)")
    prompt = p.add_mutually_exclusive_group()
    prompt.add_argument("--prompt", help="prompt text (needs the checkpoint's tiktoken.model); streams text")
    prompt.add_argument("--prompt-ids", help="comma-separated token ids; streams token ids")
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=0, help="0 = off")
    p.add_argument("--min-p", type=float, default=0.0, help="drop tokens below min-p x the top probability; 0 = off")
    p.add_argument("--repetition-penalty", type=float, default=1.0, help="1 = off (vLLM's: >1 discourages repeats)")
    p.add_argument("--stop", action="append", default=[], metavar="TEXT", help="stop at this text (repeatable)")
    p.add_argument("--threads", type=int, default=None,
                   help="CPU threads for compute (default: torch's, one per core; also OMP_NUM_THREADS)")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--ignore-eos", action="store_true")
    p.add_argument("--tokenizer", help="directory with tiktoken.model (default: the checkpoint's own)")
    p.add_argument("--save-state", metavar="FILE", help="write the sequence state here when generation ends")
    p.add_argument("--resume-state", metavar="FILE",
                   help="continue from a saved state (its tokens are not computed again); with --prompt-ids, "
                        "they must begin with the saved tokens")
    p.add_argument("--image", action="append", default=[], metavar="FILE",
                   help="an image for the prompt (repeatable; PNG, JPEG or WebP): at each <|kimi_image_placeholder|> "
                        "in the prompt, else before its text")
    add_engine_arguments(p, max_num_seqs=1, cache_memory="512MiB")


def _with_images(prompt: str, images: list[str]) -> dict:
    """vLLM's dict prompt: the images at the prompt's markers, or ahead of its text when it has none."""
    from k3.engine.image_prompts import PLACEHOLDER

    text = prompt if PLACEHOLDER in prompt else PLACEHOLDER * len(images) + prompt
    return {"prompt": text, "multi_modal_data": {"image": list(images)}}


def _prompt_text(args) -> str | None:
    """PROMPT, --prompt, or stdin (`-`, or no prompt at all with input piped in)."""
    given = [x for x in (args.prompt_text, args.prompt, args.prompt_ids) if x is not None]
    if len(given) > 1:
        raise ValueError("give the prompt once: PROMPT, --prompt or --prompt-ids")
    if args.prompt_text == "-" or (not given and not args.resume_state and not sys.stdin.isatty()):
        text = sys.stdin.read()
        if not text:
            raise ValueError("the prompt read from stdin is empty")
        return text
    return args.prompt_text if args.prompt_text is not None else args.prompt


def _ids(text: str) -> list[int]:
    try:
        return [int(x) for x in text.replace(" ", "").split(",") if x]
    except ValueError:
        raise ValueError(f"--prompt-ids: expected comma-separated integers, got {text!r}") from None


def check_images(args, model) -> None:
    """Before the model loads: each --image is a file whose header reads as an image within the limits, and the
    model has a tower to see it (a text-only checkpoint used to fail only after loading)."""
    if not args.image:
        return
    from k3.config import load_config
    from k3.media import ImageError
    from k3.media.image import measure

    for f in args.image:
        if not Path(f).is_file():
            raise ValueError(f"--image {f}: no such file")
        try:
            measure(f)
        except ImageError as e:
            raise ValueError(f"--image {f}: {e}") from None
    if args.vision is False or load_config(model).vision is None:
        why = "--no-vision was given" if args.vision is False else "its checkpoint has no vision tower"
        raise ValueError(f"--image: {model} takes text only here ({why}); use a checkpoint with a tower (the "
                         "released one, or `k3 synth DIR --preset tiny-vision` to try images)")


def run(args) -> int:
    from k3.engine import LLM, SamplingParams

    from k3.cli.target import check_tokenizer, set_threads
    from k3.models import resolve_model

    params = SamplingParams(max_tokens=args.max_tokens, temperature=args.temperature, top_p=args.top_p,
                            top_k=args.top_k, min_p=args.min_p, repetition_penalty=args.repetition_penalty,
                            stop=tuple(args.stop), seed=args.seed, ignore_eos=args.ignore_eos)
    set_threads(args.threads)
    args.prompt = _prompt_text(args)
    model = resolve_model(args.model)
    check_images(args, model)
    if args.prompt is not None:
        check_tokenizer(model, args.tokenizer, "a text prompt")
    llm = LLM(model, engine_config(args), tokenizer=args.tokenizer)
    print(llm.capacity.describe(), file=sys.stderr)
    if getattr(llm.model, "memory_plan", None) is not None:
        print(describe_plan(llm.model.memory_plan), file=sys.stderr)
    prompt = _ids(args.prompt_ids) if args.prompt_ids is not None else args.prompt
    if prompt is None and not args.resume_state:
        raise ValueError("give --prompt, --prompt-ids or --resume-state")
    if args.image:
        if args.prompt is None:
            raise ValueError("--image goes with a text prompt (PROMPT or --prompt)")
        prompt = _with_images(prompt, args.image)
    start = time.perf_counter()
    first = last = None
    shown = ""
    for out in llm.stream(None if prompt is None else [prompt], params, save_state=args.save_state,
                          resume_from=args.resume_state):
        first = first or time.perf_counter()
        if args.prompt is not None:
            print(out.text[len(shown):], end="", flush=True)
            shown = out.text
        else:
            print(" ".join(map(str, out.new_token_ids)), end=" ", flush=True)
        last = out
    end = time.perf_counter()
    llm.engine.close()   # with --prefix-cache-spill-dir: the next run resumes from this one's snapshots
    n = len(last.token_ids) if last else 0
    decode_s = end - first if first else 0.0
    rate = (n - 1) / decode_s if n > 1 and decode_s > 0 else float("nan")
    print()
    print(f"[prompt {len(last.prompt_token_ids) if last else 0} tokens, generated {n}, finish {last.finish_reason if last else None}, "
          f"TTFT {(first - start) * 1e3 if first else float('nan'):.1f} ms, {rate:.1f} tokens/s]", file=sys.stderr)
    stats = llm.engine.stats()
    if stats.get("prefix_cache_hits"):
        print(f"[prefix cache: {stats['prefix_cache_hits']:,} of {stats['prefix_cache_queries']:,} prompt tokens "
              "reused]", file=sys.stderr)
    if stats.get("spec_windows"):
        print(f"[speculative: {stats['spec_accepted_tokens']:,} of {stats['spec_drafted_tokens']:,} drafts accepted "
              f"({stats['spec_acceptance_rate']:.1%}), {stats['spec_mean_accepted_length']:.2f} tokens per verify step]", file=sys.stderr)
    streaming = streaming_summary(stats)
    if streaming:
        print(streaming, file=sys.stderr)
    return 0 if last is None or last.finish_reason != "error" else 1


def describe_plan(plan) -> str:
    return (f"memory plan: {plan.mode}; resident {plan.resident_bytes / 1e9:.3f} GB of {plan.budget / 1e9:.3f} GB "
            f"(trunk {plan.trunk_bytes / 1e9:.3f}, sequence state {plan.state_bytes / 1e9:.3f}, "
            f"{plan.expert_slots:,}/{plan.num_experts_total:,} experts)")


def streaming_summary(stats: dict) -> str | None:
    if "expert_bytes_read" not in stats:
        return None
    return (f"[experts: {stats['expert_bytes_per_token'] / 1e9:.4f} GB read per token, hit rate "
            f"{stats['expert_hit_rate']:.1%}, {stats['read_bytes_per_s'] / 1e9:.2f} GB/s per read, "
            f"{'O_DIRECT' if stats['direct_io'] else 'buffered'}; time reading (waited) "
            f"{stats['wait_seconds']:.2f} s, computing {stats['compute_seconds']:.2f} s]")
