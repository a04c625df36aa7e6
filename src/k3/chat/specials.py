"""K3's 256 reserved special tokens (spec §6.1), as offsets from the end of the BPE ranks.

In the released vocabulary the ranks end at 163583, so offset 2 (`<|end_of_msg|>`) is id 163586.
Names come from `tokenizer_config.json` when it names them; these are the defaults otherwise.
"""

from __future__ import annotations

NUM_SPECIAL = 256

OPEN = "<|open|>"
CLOSE = "<|close|>"
SEP = "<|sep|>"
END_OF_MSG = "<|end_of_msg|>"

DEFAULT_NAMES = {
    0: "[BOS]", 1: "[EOS]", 2: END_OF_MSG, 3: OPEN, 4: CLOSE, 5: SEP, 6: "[start_header_id]",
    7: "[end_header_id]", 9: "[EOT]", 18: "<|media_begin|>", 19: "<|media_content|>", 20: "<|media_end|>",
    21: "<|media_pad|>", 65: "<osagent_mode>", 254: "[UNK]", 255: "[PAD]",
}


def special_names(num_ranks: int, configured: dict[int, str] | None = None) -> dict[str, int]:
    """name -> id for all 256 specials: configured names first, then the defaults, then reserved names."""
    configured = configured or {}
    out = {}
    for offset in range(NUM_SPECIAL):
        token_id = num_ranks + offset
        name = configured.get(token_id) or DEFAULT_NAMES.get(offset) or f"<|reserved_token_{token_id}|>"
        out[name] = token_id
    return out
