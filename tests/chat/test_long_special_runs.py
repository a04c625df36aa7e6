"""A special name is never cut by the long-run splitter: an image block is one run of `<|media_pad|>` names far
past 25,000 characters, and each name must stay its one special id (issue 67: 1920x1080 lost one pad)."""

from __future__ import annotations

from k3.chat.tokenizer import MAX_RUN_CHARS, K3Tokenizer
from k3.defaults import default_model
from k3.media import image_block

TOK = K3Tokenizer.load(default_model())
PAD = TOK.specials["<|media_pad|>"]


def test_every_pad_of_a_long_block_is_its_special_id():
    for n in (1, 1923, 2691, 15552, 16384):
        ids = TOK.encode(image_block(4032, 3024, n), special=True)
        assert ids.count(PAD) == n
        assert ids[0] == TOK.specials["<|media_begin|>"] and ids[-1] == TOK.specials["<|media_end|>"]


def test_specials_mode_matches_tiktoken_where_nothing_is_cut():
    text = "a<|open|>b c<|media_pad|><|media_pad|>d  " + "x" * 100
    assert TOK.encode(text, special=True) == TOK.encoding.encode(text, allowed_special="all")
    assert TOK.encode("", special=True) == []


def test_plain_text_is_still_cut_as_the_official_tokenizer_cuts_it():
    run = "ab" * MAX_RUN_CHARS                       # one non-space run, twice the cutting length
    assert TOK.encode(run) == TOK.encode(run, special=True)
    assert TOK.encode(run) == TOK.encoding.encode(run[:MAX_RUN_CHARS], disallowed_special=()) + \
        TOK.encoding.encode(run[MAX_RUN_CHARS:], disallowed_special=())
