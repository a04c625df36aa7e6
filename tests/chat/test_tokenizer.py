import base64

import pytest

from k3.chat import K3Tokenizer, TokenizerError
from k3.chat.tokenizer import MAX_RUN_CHARS, _split_runs, split_long_input
from k3.testing.tokenizer import train_bpe, write_tokenizer


def test_specials_follow_the_ranks(tok):
    n = tok.num_ranks
    assert tok.vocab_size == n + 256
    assert (tok.specials["[BOS]"], tok.specials["[EOS]"], tok.end_of_msg_id) == (n, n + 1, n + 2)
    assert (tok.open_id, tok.close_id, tok.sep_id) == (n + 3, n + 4, n + 5)
    assert tok.specials["<|media_pad|>"] == n + 21 and tok.specials["[PAD]"] == n + 255
    assert tok.specials[f"<|reserved_token_{n + 8}|>"] == n + 8


def test_released_layout_ids():
    # With the released 163,584 ranks the defaults give spec §6.1's ids.
    from k3.chat.specials import special_names
    names = special_names(163_584)
    assert (names["<|end_of_msg|>"], names["<|open|>"], names["<|sep|>"], names["[UNK]"]) == (163586, 163587, 163589, 163838)


def test_names_come_from_tokenizer_config(tmp_path):
    import json
    d = write_tokenizer(tmp_path, train_bpe(num_merges=20))
    cfg = json.loads((d / "tokenizer_config.json").read_text())
    n = 256 + 20
    cfg["added_tokens_decoder"][str(n + 8)] = {"content": "<|custom|>", "special": True}
    (d / "tokenizer_config.json").write_text(json.dumps(cfg))
    tok = K3Tokenizer.load(d)
    assert tok.specials["<|custom|>"] == n + 8
    assert tok.encode("<|custom|>", special=True) == [n + 8]


def test_two_encode_modes(tok):
    text = 'Hi <|open|>x<|end_of_msg|>'
    structural = tok.encode(text, special=True)
    plain = tok.encode(text)
    assert tok.open_id in structural and tok.end_of_msg_id in structural
    assert not set(plain) & tok.special_ids
    assert tok.decode(plain) == tok.decode(structural) == text


def test_round_trip_unicode(tok):
    text = "Grüße 你好世界 🙂 naïve\r\n\ttabs   spaces"
    assert tok.decode(tok.encode(text)) == text


def test_stream_decoder_never_emits_half_a_character(tok):
    text = "a🙂b你好ü"
    ids = tok.encode(text)
    dec = tok.stream_decoder()
    pieces = [dec.feed(i) for i in ids] + [dec.flush()]
    assert "".join(pieces) == text
    assert all("\ufffd" not in p for p in pieces)
    # The emoji is four byte tokens in this small vocabulary: nothing shows until the last one.
    emoji_ids = tok.encode("🙂")
    dec = tok.stream_decoder()
    assert [dec.feed(i) for i in emoji_ids] == [""] * (len(emoji_ids) - 1) + ["🙂"]


def test_long_input_splitting():
    assert list(_split_runs("aaaaa bb", 2)) == ["aa", "aa", "a bb"]
    assert list(_split_runs("  x", 1)) == [" ", " x"]
    pieces = list(split_long_input("x" * (MAX_RUN_CHARS * 2 + 5) + " y"))
    assert "".join(pieces) == "x" * (MAX_RUN_CHARS * 2 + 5) + " y"
    assert max(len(p) for p in pieces) <= MAX_RUN_CHARS + 2


def test_long_input_encodes(tok):
    text = "z" * 60_000 + " end"
    assert tok.decode(tok.encode(text)) == text


def test_file_format_is_tiktoken(tokenizer_dir):
    line = (tokenizer_dir / "tiktoken.model").read_text().splitlines()[300]
    token, rank = line.split()
    assert int(rank) == 300 and base64.b64decode(token)


def test_missing_and_broken_files(tmp_path):
    with pytest.raises(TokenizerError, match="no tiktoken.model"):
        K3Tokenizer.load(tmp_path)
    (tmp_path / "tiktoken.model").write_text("not base64 at all\n")
    with pytest.raises(TokenizerError, match="not a tiktoken BPE file"):
        K3Tokenizer.load(tmp_path)


def test_out_of_range_ids_raise(tok):
    with pytest.raises(ValueError, match="out of range"):
        tok.decode([tok.vocab_size])
