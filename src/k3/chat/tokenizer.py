"""K3Tokenizer: tiktoken over K3's `tiktoken.model`, its 256 specials and its pre-tokenizer pattern.

Two encode modes: structural markers with every special recognised (`special=True`), and user,
tool and attribute text with none recognised (a typed `<|open|>` becomes ordinary tokens).
Long inputs are cut into <= 400,000-character pieces with no whitespace or non-whitespace run
over 25,000 characters (tiktoken's limits), exactly as the official tokenizer does.
"""

from __future__ import annotations

import base64
import codecs
import json
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

import tiktoken
from tiktoken.load import load_tiktoken_bpe

from k3.chat.specials import CLOSE, END_OF_MSG, OPEN, SEP, special_names

VOCAB_FILE = "tiktoken.model"
CONFIG_FILE = "tokenizer_config.json"
MAX_ENCODE_CHARS = 400_000
MAX_RUN_CHARS = 25_000

# Han runs; o200k-style case rules with Han excluded from the letter classes; no '/' in rule 5.
_NON_HAN_UPPER = r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]"
_NON_HAN_LOWER = r"[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]"
_CONTRACTIONS = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
K3_PATTERN = "|".join([
    r"[\p{Han}]+",
    r"[^\r\n\p{L}\p{N}]?" + _NON_HAN_UPPER + "*" + _NON_HAN_LOWER + "+" + _CONTRACTIONS,
    r"[^\r\n\p{L}\p{N}]?" + _NON_HAN_UPPER + "+" + _NON_HAN_LOWER + "*" + _CONTRACTIONS,
    r"\p{N}{1,3}",
    r" ?[^\s\p{L}\p{N}]+[\r\n]*",
    r"\s*[\r\n]+",
    r"\s+(?!\S)",
    r"\s+",
])


class TokenizerError(ValueError):
    """A missing or unreadable tokenizer file; the message names the file and the fix."""


class K3Tokenizer:
    def __init__(self, ranks: dict[bytes, int], configured_names: dict[int, str] | None = None, name: str = "k3",
                 thinking: bool = True):
        self.num_ranks = len(ranks)
        # Whether a chat answer opens with a think channel when the caller does not say: K3 thinks by
        # default; a model trained without the XTML format (k3's own) never closes one, so its
        # tokenizer_config.json says `"chat_template_kwargs": {"thinking": false}`.
        self.thinking = thinking
        # The most text one token can stand for: a prompt longer than N times this cannot fit N tokens.
        self.max_token_bytes = max([len(b) for b in ranks] + [len(n.encode()) for n in (configured_names or {}).values()]
                                   + [1])
        self.specials = special_names(self.num_ranks, configured_names)
        self.special_ids = frozenset(self.specials.values())
        self.encoding = tiktoken.Encoding(name=name, pat_str=K3_PATTERN, mergeable_ranks=ranks,
                                          special_tokens=self.specials)
        known = set(ranks.values()) | set(self.special_ids)
        # Ids below vocab_size that decode to nothing (a BPE file whose ranks skip some, specials placed
        # past a gap): refused in prompts and never sampled (engine.py), so no output can fail to decode.
        self.holes = tuple(i for i in range(self.vocab_size) if i not in known)
        self._holes = frozenset(self.holes)
        self._special_pattern = re.compile("|".join(re.escape(n) for n in sorted(self.specials, key=len, reverse=True)))
        self.open_id, self.close_id = self.specials[OPEN], self.specials[CLOSE]
        self.sep_id, self.end_of_msg_id = self.specials[SEP], self.specials[END_OF_MSG]

    @classmethod
    def load(cls, path: str | Path) -> "K3Tokenizer":
        """`path`: a directory with tiktoken.model (and optionally tokenizer_config.json), or the file."""
        p = Path(path)
        vocab = p / VOCAB_FILE if p.is_dir() else p
        if not vocab.is_file():
            raise TokenizerError(f"no {VOCAB_FILE} at {vocab}: download it with the checkpoint")
        try:
            ranks = load_tiktoken_bpe(str(vocab))
        except Exception as e:
            raise TokenizerError(f"{vocab} is not a tiktoken BPE file (base64 token + rank per line): {e}") from None
        config = _read_config(vocab.parent / CONFIG_FILE)
        return cls(ranks, _configured_names(config), name=vocab.name, thinking=_thinking_default(config))

    @property
    def vocab_size(self) -> int:
        return self.num_ranks + len(self.specials)

    def encode(self, text: str, *, special: bool = False) -> list[int]:
        """special=True: `<|...|>` names become their special ids; False: they are plain text.

        With specials, the names are taken out before long inputs are cut (split_long_input), so a cut never
        falls inside one: an image block is `<|media_pad|>` thousands of times over, one run of non-space
        characters far past the cutting length, and a name cut in two would become text."""
        if not special:
            return [t for piece in split_long_input(text) for t in self.encoding.encode(piece, disallowed_special=())]
        ids: list[int] = []
        start = 0
        for m in self._special_pattern.finditer(text):
            if m.start() > start:
                ids += self.encode(text[start:m.start()])
            ids.append(self.specials[m.group()])
            start = m.end()
        return ids + self.encode(text[start:]) if start < len(text) else ids

    def encode_segments(self, segments: Iterable) -> list[int]:
        """Segments (`.text`, `.special`) encoded one by one: segment edges are BPE boundaries."""
        return [t for seg in segments for t in self.encode(seg.text, special=seg.special)]

    def decode(self, ids: Iterable[int]) -> str:
        return self.token_bytes(ids).decode("utf-8", errors="replace")

    def token_bytes(self, ids: Iterable[int]) -> bytes:
        ids = list(ids)
        bad = [t for t in ids if not 0 <= t < self.vocab_size]
        if bad:
            raise ValueError(f"token ids out of range [0, {self.vocab_size}): {bad[:5]}")
        holes = [t for t in ids if t in self._holes] if self._holes else []
        if holes:
            raise ValueError(f"token ids {holes[:5]} are not in this tokenizer's vocabulary (it has no token there)")
        return self.encoding.decode_bytes(ids)

    def stream_decoder(self) -> "StreamDecoder":
        return StreamDecoder(self)


class StreamDecoder:
    """Incremental detokenisation that never emits half a UTF-8 character."""

    def __init__(self, tokenizer: K3Tokenizer):
        self.tokenizer = tokenizer
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, token_id: int) -> str:
        return self._utf8.decode(self.tokenizer.token_bytes([token_id]), final=False)

    def flush(self) -> str:
        """Whatever bytes are pending, with an incomplete character shown as U+FFFD."""
        return self._utf8.decode(b"", final=True)


def split_long_input(text: str) -> Iterator[str]:
    for start in range(0, len(text), MAX_ENCODE_CHARS):
        yield from _split_runs(text[start:start + MAX_ENCODE_CHARS], MAX_RUN_CHARS)


def _split_runs(s: str, limit: int) -> Iterator[str]:
    """Cut `s` so no piece holds more than `limit` consecutive whitespace or non-whitespace characters."""
    run, start = 0, 0
    in_space = s[0].isspace() if s else False
    for i, ch in enumerate(s):
        if ch.isspace() != in_space:
            in_space, run = ch.isspace(), 1
            continue
        run += 1
        if run > limit:
            yield s[start:i]
            start, run = i, 1
    yield s[start:]


def _read_config(path: Path) -> tuple[Path, dict]:
    if not path.is_file():
        return path, {}
    try:
        config = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise TokenizerError(f"{path} is not valid JSON ({e}); re-download it with the checkpoint") from None
    if not isinstance(config, dict):
        raise TokenizerError(f"{path} must hold a JSON object; re-download it with the checkpoint")
    return path, config


def _configured_names(config: tuple[Path, dict]) -> dict[int, str]:
    path, fields = config
    try:
        decoder = fields.get("added_tokens_decoder") or {}
        return {int(k): v["content"] for k, v in decoder.items()}
    except (AttributeError, KeyError, TypeError, ValueError) as e:
        raise TokenizerError(f"{path}: unreadable added_tokens_decoder ({e!r})") from None


def _thinking_default(config: tuple[Path, dict]) -> bool:
    path, fields = config
    value = (fields.get("chat_template_kwargs") or {}).get("thinking", True)
    if not isinstance(value, bool):
        raise TokenizerError(f"{path}: chat_template_kwargs.thinking must be true or false, not {value!r}")
    return value


def save_tokenizer(out_dir: str | Path, ranks: dict[bytes, int], *, with_config: bool = True,
                   thinking: bool = True) -> Path:
    """Write `ranks` as tiktoken.model (base64 token + rank per line) and tokenizer_config.json naming
    the specials, the files K3 ships; ranks must be 0..n-1 without gaps. thinking=False: chat answers
    open without a think channel unless a request asks for one (a model not trained on XTML)."""
    if sorted(ranks.values()) != list(range(len(ranks))):
        raise ValueError("tokenizer ranks must be 0..n-1 without gaps or repeats")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    lines = [f"{base64.b64encode(tok).decode()} {rank}" for tok, rank in sorted(ranks.items(), key=lambda kv: kv[1])]
    (out / VOCAB_FILE).write_text("\n".join(lines) + "\n")
    if with_config:
        names = special_names(len(ranks))
        decoder = {str(i): {"content": n, "special": True} for n, i in names.items() if "reserved" not in n}
        config = {"tokenizer_class": "TikTokenTokenizer", "bos_token": "[BOS]", "eos_token": "[EOS]",
                  "pad_token": "[PAD]", "unk_token": "[UNK]", "added_tokens_decoder": decoder,
                  "additional_special_tokens": ["<|end_of_msg|>"], "model_max_length": 10 ** 30}
        if not thinking:
            config["chat_template_kwargs"] = {"thinking": False}
        (out / CONFIG_FILE).write_text(json.dumps(config, indent=1))
    return out
