"""The text an image takes in a K3 prompt (vision spec §6 and 7): `<|media_begin|>image {W}x{H}<|media_content|>`,
one `<|media_pad|>` per image row, `<|media_end|>`, with the upload's own width and height. Rendered as one
segment in which special names are recognised; user text never is, so a typed `<|media_pad|>` (or
`<|kimi_image_placeholder|>`) stays plain text and cannot claim an image's rows."""

from __future__ import annotations

MEDIA_BEGIN = "<|media_begin|>"
MEDIA_CONTENT = "<|media_content|>"
MEDIA_END = "<|media_end|>"
MEDIA_PAD = "<|media_pad|>"


def image_block(width: int, height: int, num_tokens: int) -> str:
    return f"{MEDIA_BEGIN}image {width}x{height}{MEDIA_CONTENT}{MEDIA_PAD * num_tokens}{MEDIA_END}"
