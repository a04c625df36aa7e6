"""k3 chat-template --messages FILE.json [--tools FILE.json] [--no-thinking] [--tokenizer DIR] ..."""

from __future__ import annotations

import json
from pathlib import Path


def add_arguments(p) -> None:
    p.add_argument("--messages", required=True, help="JSON file: a list of chat messages (OpenAI format; image "
                   "parts as data: URLs or file paths, relative to the file)")
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


def _images(messages, base: Path):
    """The messages' images prepared with the released preprocessing (paths relative to the messages file),
    so their blocks show with the token counts they take; None when there are none."""
    from k3.chat.images import image_sources

    sources = image_sources(messages)
    if not sources:
        return None
    from k3.config.vision import MediaConfig
    from k3.engine.image_prompts import prepare_all
    from k3.media import ImageLimits

    local = [s if not isinstance(s, str) or s.startswith("data:") or Path(s).is_absolute() else base / s for s in sources]
    return prepare_all(local, MediaConfig(), ImageLimits())


def run(args) -> int:
    from k3.chat import K3Tokenizer, render, to_text

    messages = _load(args.messages, "messages")
    segments = render(messages, tools=_load(args.tools, "tools") if args.tools else None,
                      images=_images(messages, Path(args.messages).parent),
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
