"""Per-request output text: incremental detokenisation and stop strings.

With a tokenizer that has `stream_decoder()` (K3Tokenizer) text grows by whole characters as tokens
arrive; otherwise the output is decoded whole each step. Special tokens are left out of the text
unless `skip_special_tokens` is off (vLLM's default and meaning). A stop string ends generation and
is cut from the text, with whatever followed it.
"""

from __future__ import annotations


def usable_vocab(vocab_size: int, tokenizer) -> int:
    """Ids a request may hold: the model's vocabulary, or with a tokenizer only those it can decode (see Sampler)."""
    decodable = getattr(tokenizer, "vocab_size", None)
    return min(vocab_size, decodable) if decodable else vocab_size


class OutputText:
    def __init__(self, tokenizer, stop: tuple[str, ...], skip_special: bool):
        self.tokenizer, self.stop, self.skip_special = tokenizer, stop, skip_special
        self.specials = getattr(tokenizer, "special_ids", frozenset()) if skip_special else frozenset()
        self.stream = tokenizer.stream_decoder() if hasattr(tokenizer, "stream_decoder") else None
        self.ids: list[int] = []
        self.text = ""
        self._scan_from = 0

    def add(self, token_id: int, final: bool = False) -> bool:
        """Append one generated token; True when a stop string now appears (text is cut before it)."""
        if token_id not in self.specials:
            if self.stream is not None:
                self.text += self.stream.feed(token_id) + (self.stream.flush() if final else "")
            else:
                self.ids.append(token_id)
                self.text = self.tokenizer.decode(self.ids)
        return self._cut_at_stop()

    def finish(self) -> None:
        if self.stream is not None:
            self.text += self.stream.flush()

    def _cut_at_stop(self) -> bool:
        if not self.stop:
            return False
        longest = max(len(s) for s in self.stop)
        start = max(0, self._scan_from - longest + 1)
        hits = [i for i in (self.text.find(s, start) for s in self.stop) if i >= 0]
        self._scan_from = len(self.text)
        if hits:
            self.text = self.text[:min(hits)]
            return True
        return False
