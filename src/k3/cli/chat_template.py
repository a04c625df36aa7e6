"""k3 chat-template --messages FILE.json [--tools FILE.json] [--no-thinking] [--tokenizer DIR] ..."""

from __future__ import annotations

import json
from pathlib import Path


def add_arguments(p) -> None:
    p.add_argument("--messages", required=True, help="JSON file: a list of chat messages (OpenAI format)")
    p.add_argument("--tools", help="JSON file: a list of tool declarations")
    p.add_argument("--no-thinking", action="store_true", help="render the non-thinking format")
    p.add_argument("--thinking-effort", choices=["low", "medium", "high", "max"])
    p.add_argument("--tool-choice", choices=["auto", "none", "required"])
    p.add_argument("--response-format", choices=["json_object"])
    p.add_argument("--no-generation-prompt", action="store_true")
    p.add_argument("--tokenizer", help="directory with tiktoken.model: also print the token ids")
    p.add_argument("--text", action="store_true", help="print the rendered string instead of the segments")


def _load(path: str, what: str):
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ValueError(f"--{what}: no file {path}") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"--{what}: {path} is not valid JSON ({e})") from None


def run(args) -> int:
    from k3.chat import K3Tokenizer, render, to_text

    segments = render(_load(args.messages, "messages"), tools=_load(args.tools, "tools") if args.tools else None,
                      thinking=not args.no_thinking, thinking_effort=args.thinking_effort,
                      add_generation_prompt=not args.no_generation_prompt, tool_choice=args.tool_choice,
                      response_format={"type": args.response_format} if args.response_format else None)
    if args.text:
        print(to_text(segments))
    else:
        for seg in segments:
            print(f"{'special' if seg.special else 'text   '} {json.dumps(seg.text, ensure_ascii=False)}")
    if args.tokenizer:
        ids = K3Tokenizer.load(args.tokenizer).encode_segments(segments)
        print(f"token ids ({len(ids)}): {ids}")
    return 0
