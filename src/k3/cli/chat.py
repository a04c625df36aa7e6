"""k3 chat [MODEL] [--system TEXT] [--thinking | --no-thinking] [--max-tokens N] ...: a conversation in the
terminal (as `ollama run MODEL` or `llama-cli -cnv`). Each line typed is a user turn; the reply streams as it
is generated, reasoning dimmed. /reset starts over, /exit (or Ctrl-D) ends. With input piped in, each line
is a turn and the replies are printed plainly. Earlier turns come from the prefix cache, not recomputed."""

from __future__ import annotations

import sys

from k3.cli.engine_args import add_engine_arguments, engine_config

DIM, RESET = "\033[2m", "\033[0m"


def add_arguments(p) -> None:
    import argparse

    p.add_argument("model", nargs="?", metavar="MODEL",
                   help="checkpoint directory, downloaded repo id, or `default` (the bundled model; the default)")
    p.add_argument("--system", help="a system message for the whole conversation")
    p.add_argument("--thinking", action=argparse.BooleanOptionalAction, default=None,
                   help="answers with (or without) reasoning; default: the model's own (on for K3, off for the "
                        "bundled model)")
    p.add_argument("--max-tokens", type=int, default=512, help="per reply")
    p.add_argument("--temperature", type=float, default=0.7, help="0 = greedy")
    p.add_argument("--top-p", type=float, default=0.95)
    p.add_argument("--min-p", type=float, default=0.0)
    p.add_argument("--repetition-penalty", type=float, default=1.0, help="1 = off")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--threads", type=int, default=None, help="CPU threads for compute (default: one per core)")
    add_engine_arguments(p, max_num_seqs=1, cache_memory="512MiB")


def run(args) -> int:
    from k3.cli.target import check_tokenizer, set_threads
    from k3.engine import LLM, SamplingParams
    from k3.models import resolve_model

    set_threads(args.threads)
    path = resolve_model(args.model)
    check_tokenizer(path, None, "chat")
    llm = LLM(str(path), engine_config(args))
    thinking = llm.tokenizer.thinking if args.thinking is None else args.thinking
    params = SamplingParams(max_tokens=args.max_tokens, temperature=args.temperature, top_p=args.top_p,
                            min_p=args.min_p, repetition_penalty=args.repetition_penalty, seed=args.seed)
    interactive = sys.stdin.isatty()
    if interactive:
        print(f"k3 chat: {args.model or 'default'} (thinking {'on' if thinking else 'off'}); /reset starts over, /exit ends",
              file=sys.stderr)
    system = [{"role": "system", "content": args.system}] if args.system else []
    messages = list(system)
    for line in _lines(interactive):
        if line in ("/exit", "/quit"):
            break
        if line == "/reset":
            messages = list(system)
            continue
        if line:
            messages.append({"role": "user", "content": line})
            messages.append(reply(llm, messages, params, thinking, color=interactive and sys.stdout.isatty()))
    return 0


def _lines(interactive: bool):
    while True:
        try:
            line = input("> " if interactive else "")
        except EOFError:
            return
        yield line.strip()


def reply(llm, messages: list[dict], params, thinking: bool, *, color: bool) -> dict:
    """Stream one assistant turn to stdout; -> the message to keep in the conversation."""
    from k3.chat import render
    from k3.chat.events import ContentDelta, ReasoningDelta
    from k3.chat.parse import MessageParser

    tok = llm.tokenizer
    ids = tok.encode_segments(render(messages, thinking=thinking))
    parser = MessageParser(tok, thinking=thinking)
    reasoning, content = [], []
    for out in llm.stream([ids], params):
        for event in (e for t in out.new_token_ids for e in parser.feed(t)):
            if isinstance(event, ReasoningDelta):
                reasoning.append(event.text)
                print(f"{DIM}{event.text}{RESET}" if color else event.text, end="", flush=True)
            elif isinstance(event, ContentDelta):
                if reasoning and not content:
                    print()
                content.append(event.text)
                print(event.text, end="", flush=True)
    parser.close()
    print()
    return {"role": "assistant", "content": "".join(content), "reasoning_content": "".join(reasoning)}
