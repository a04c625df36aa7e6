"""Small byte-level BPE vocabularies in K3's `tiktoken.model` format, for tests and demos.

The released `tiktoken.model` cannot be fetched here; a vocabulary trained on a few kilobytes of
text exercises the same loader, specials, encode modes and chat code. Ranks 0-255 are the single
bytes, so any text encodes.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from k3.chat.tokenizer import save_tokenizer

SAMPLE_TEXT = (
    "The quick brown fox jumps over the lazy dog. Kimi K3 is a hybrid model: Kimi Delta Attention, "
    "gated multi-head latent attention, attention residuals and a latent mixture of experts. "
    "<|open|>message role=\"user\"<|sep|>What is the weather in Paris today?<|close|>message<|sep|> "
    "<|open|>think<|sep|>The user asks about the weather.<|close|>think<|sep|><|open|>response<|sep|>"
    "It is sunny.<|close|>response<|sep|> {\"location\": \"Paris\", \"unit\": \"celsius\"} "
    "def add(a, b):\n    return a + b\n\nprint(add(1, 2))\n 你好世界 日本語 Ünïcödé ελληνικά "
)


def train_bpe(text: str = SAMPLE_TEXT * 4, num_merges: int = 300) -> dict[bytes, int]:
    """Greedy byte-pair merges over whitespace-led words: {token bytes: rank}."""
    words = Counter(tuple(bytes([b]) for b in w.encode()) for w in re.findall(r" ?\w+| ?[^\w\s]+|\s+", text))
    ranks = {bytes([b]): b for b in range(256)}
    for _ in range(num_merges):
        pairs: Counter = Counter()
        for word, n in words.items():
            for a, b in zip(word, word[1:]):
                pairs[(a, b)] += n
        if not pairs:
            break
        (a, b), _ = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
        # The same bytes can arise from two different pairs; ranks must stay 0..n-1 without gaps.
        ranks.setdefault(a + b, len(ranks))
        words = Counter({_merge(w, a, b): n for w, n in words.items()})
    return ranks


def _merge(word: tuple[bytes, ...], a: bytes, b: bytes) -> tuple[bytes, ...]:
    out, i = [], 0
    while i < len(word):
        if i + 1 < len(word) and word[i] == a and word[i + 1] == b:
            out.append(a + b)
            i += 2
        else:
            out.append(word[i])
            i += 1
    return tuple(out)


def ranks_for_vocab(vocab_size: int) -> dict[bytes, int]:
    """Exactly vocab_size - 256 ranks (the rest are the 256 specials), padded with unreachable tokens
    when the sample text runs out of merges."""
    n = vocab_size - 256
    if n < 256:
        raise ValueError(f"vocab_size {vocab_size} is too small for a byte-level vocabulary plus 256 specials "
                         "(need >= 512)")
    ranks = train_bpe(num_merges=min(n - 256, 2000))
    pad = 0
    while len(ranks) < n:
        ranks.setdefault(f"\x00<unused {pad}>".encode(), len(ranks))
        pad += 1
    return ranks


def write_tokenizer(out_dir: str | Path, ranks: dict[bytes, int] | None = None, *, with_config: bool = True) -> Path:
    """Write a small trained vocabulary (default: `train_bpe()`) in K3's tokenizer file format."""
    return save_tokenizer(out_dir, ranks or train_bpe(), with_config=with_config)
