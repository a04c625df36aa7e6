"""Seeded benchmark workloads. Each prompt carries token ids (for the local engine and completion
endpoints) and the same length as text (for chat endpoints, whose servers tokenize themselves).

fixed: n prompts of input_len tokens, output_len tokens each.
context-sweep: at each context length, a few prompts of that length: decode cost against context
(K3's KDA state is constant; only MLA grows).
shared-prefix: prompts sharing a common prefix of prefix_len tokens (prefix-caching behaviour).
multi-turn: conversations whose turn k repeats turns 1..k-1 (with fixed synthetic replies) and adds
a new user message; a turn is sent only after the previous turn of its conversation finished.
jsonl: one request per line: {"prompt": str} | {"prompt_ids": [int]} | {"messages": [...]}, with an
optional "max_tokens"; {"prompt": str, "images": [files]} sends the files (relative to the dataset) with it.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from k3.bench.images import row_images, user_message
from k3.bench.prompt import BenchPrompt

WORDS = ("time year people way day man thing woman life child world school state family student group "
         "country problem hand part place case week company system program question work government number "
         "night point home water room mother area money story fact month lot right study book eye job word "
         "business issue side kind head house service friend father power hour game line end member law car "
         "city community name president team minute idea kid body information back parent face others level "
         "office door health person art war history party result change morning reason research girl guy "
         "moment air teacher force education river garden letter window summer winter market music paper").split()


def _ids(rng: random.Random, n: int, vocab: int) -> list[int]:
    return [rng.randrange(vocab) for _ in range(n)]


def _text(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def fixed(n: int, input_len: int, output_len: int, vocab: int, seed: int, tag: dict | None = None) -> list[BenchPrompt]:
    rng = random.Random(seed)
    return [BenchPrompt(_ids(rng, input_len, vocab), _text(rng, input_len), output_len, tag=dict(tag or {}))
            for _ in range(n)]


def context_sweep(contexts: list[int], per_context: int, output_len: int, vocab: int, seed: int) -> list[BenchPrompt]:
    out = []
    for i, ctx in enumerate(contexts):
        out += fixed(per_context, ctx, output_len, vocab, seed + i, tag={"context": ctx})
    return out


def shared_prefix(n: int, prefix_len: int, input_len: int, output_len: int, vocab: int, seed: int) -> list[BenchPrompt]:
    rng = random.Random(seed)
    prefix_ids, prefix_text = _ids(rng, prefix_len, vocab), _text(rng, prefix_len)
    rest = max(1, input_len - prefix_len)
    return [BenchPrompt(prefix_ids + _ids(rng, rest, vocab), prefix_text + " " + _text(rng, rest), output_len,
                        tag={"prefix": prefix_len}) for _ in range(n)]


def multi_turn(conversations: int, turns: int, input_len: int, output_len: int, vocab: int, seed: int
               ) -> list[BenchPrompt]:
    rng = random.Random(seed)
    out: list[BenchPrompt] = []
    for c in range(conversations):
        ids: list[int] = []
        messages: list[dict] = []
        for t in range(turns):
            user_ids, user_text = _ids(rng, input_len, vocab), _text(rng, input_len)
            ids = ids + user_ids
            messages = messages + [{"role": "user", "content": user_text}]
            after = len(out) - 1 if t else None
            out.append(BenchPrompt(list(ids), user_text, output_len, messages=list(messages),
                                   tag={"conversation": c, "turn": t + 1}, after=after))
            reply_ids, reply_text = _ids(rng, output_len, vocab), _text(rng, output_len)
            ids = ids + reply_ids
            messages = messages + [{"role": "assistant", "content": reply_text}]
    return out


def from_jsonl(path: str | Path, default_output_len: int, limit: int | None = None) -> list[BenchPrompt]:
    out = []
    for i, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            max_tokens = int(row.get("max_tokens", default_output_len))
            prompt_ids = row.get("prompt_ids")
            messages = row.get("messages")
            if row.get("images"):            # {"prompt": ..., "images": [files]}: one user message with them
                messages = [user_message(row.get("prompt") or "", row_images(row, Path(path).parent))]
            out.append(BenchPrompt(list(prompt_ids) if prompt_ids is not None else None, row.get("prompt"),
                                   max_tokens, messages=messages, tag={"line": i}))
        except (ValueError, TypeError, AttributeError) as e:
            raise ValueError(f"{path} line {i}: not a benchmark request ({e}); expected JSON with "
                             "prompt, prompt_ids or messages") from None
        if out[-1].ids is None and out[-1].text is None and out[-1].messages is None:
            raise ValueError(f"{path} line {i}: needs prompt, prompt_ids or messages")
        if limit and len(out) >= limit:
            break
    return out
