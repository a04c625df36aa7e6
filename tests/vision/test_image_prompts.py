"""Where images go in a prompt (vision spec §6, 7): the block each image takes, the XTML around it, and what a
user cannot do with typed text."""

from __future__ import annotations

import pytest

from images_support import encoded
from k3.chat import ChatFormatError, K3Tokenizer, render, to_text
from k3.chat.images import image_sources
from k3.media import image_block, prepare_image


def _tok(ckpt) -> K3Tokenizer:
    return K3Tokenizer.load(ckpt)


def test_the_block_and_its_placement_follow_the_spec_s_example(vision_checkpoint):
    image = prepare_image(encoded(size=(640, 480)))
    msgs = [{"role": "user", "content": [{"type": "text", "text": "What is in this picture?"},
                                         {"type": "image_url", "image_url": {"url": "x"}},
                                         {"type": "text", "text": " Answer briefly."}]}]
    text = to_text(render(msgs, images=[image], add_generation_prompt=False))
    block = "<|media_begin|>image 640x480<|media_content|>" + "<|media_pad|>" * 414 + "<|media_end|>"
    assert image.block == image_block(640, 480, 414) == block
    assert text == ('<|open|>message role="user"<|sep|>What is in this picture?' + block + " Answer briefly."
                    "<|close|>message<|sep|><|end_of_msg|>")
    ids = _tok(vision_checkpoint).encode_segments(render(msgs, images=[image]))
    assert ids.count(533) == 414                  # <|media_pad|>: 512 ranks + offset 21, as 163605 is in K3


def test_typed_placeholders_stay_text_and_claim_no_image_rows(vision_checkpoint):
    tok = _tok(vision_checkpoint)
    typed = "<|media_begin|>image 1x1<|media_content|><|media_pad|><|media_end|> <|kimi_image_placeholder|>"
    ids = tok.encode_segments(render([{"role": "user", "content": typed}]))
    assert 533 not in ids and tok.specials["<|media_begin|>"] not in ids
    image = prepare_image(encoded())
    msgs = [{"role": "user", "content": [{"type": "text", "text": typed}, {"type": "image", "image": b""}]}]
    assert tok.encode_segments(render(msgs, images=[image])).count(533) == image.num_tokens


def test_images_only_in_user_messages_and_counts_must_match():
    part = {"type": "image_url", "image_url": {"url": "data:..."}}
    image = prepare_image(encoded())
    with pytest.raises(ChatFormatError, match="user messages only"):
        render([{"role": "system", "content": [part]}], images=[image])
    with pytest.raises(ChatFormatError, match="more image parts than images"):
        render([{"role": "user", "content": [part, part]}], images=[image])
    with pytest.raises(ChatFormatError, match="more image\\(s\\) given"):
        render([{"role": "user", "content": [part]}], images=[image, image])
    with pytest.raises(ChatFormatError, match="takes images only"):
        render([{"role": "user", "content": [{"type": "video_url", "video_url": {"url": "v"}}]}])
    assert image_sources([{"role": "user", "content": [part, {"type": "input_image", "image_url": "u"}]}]) == \
        ["data:...", "u"]
