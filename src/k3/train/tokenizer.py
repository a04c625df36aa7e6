"""Train a byte-level BPE vocabulary and save it as K3 ships its own: `tiktoken.model` + 256 specials.

Training uses Hugging Face `tokenizers` with K3's pre-tokenizer pattern; merges become tiktoken
ranks in merge order (rank 0-255 = single bytes), so the result loads through `K3Tokenizer`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from k3.chat.specials import NUM_SPECIAL
from k3.chat.tokenizer import K3_PATTERN


def byte_alphabet() -> dict[int, str]:
    """Byte -> printable character, as byte-level BPE trainers spell bytes (GPT-2's table)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, extra = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def train_tokenizer(texts: Iterable[str], vocab_size: int) -> dict[bytes, int]:
    """-> {token bytes: rank} with exactly vocab_size - 256 ranks (the other 256 ids are specials)."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers, trainers

    num_ranks = vocab_size - NUM_SPECIAL
    if num_ranks < 256:
        raise ValueError(f"vocab_size must be >= {256 + NUM_SPECIAL} (256 bytes + 256 specials)")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(K3_PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    trainer = trainers.BpeTrainer(vocab_size=num_ranks, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(texts, trainer)
    to_byte = {c: b for b, c in byte_alphabet().items()}
    ranks = {bytes([b]): b for b in range(256)}
    for merge in json.loads(tok.to_str())["model"]["merges"]:
        a, b = merge if isinstance(merge, list) else merge.split(" ")
        if len(ranks) < num_ranks:
            ranks.setdefault(bytes(to_byte[c] for c in a + b), len(ranks))
    pad = 0
    while len(ranks) < num_ranks:
        ranks.setdefault(f"\x00<unused {pad}>".encode(), len(ranks))
        pad += 1
    return ranks
