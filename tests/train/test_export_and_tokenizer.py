import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import k3
from k3.chat import K3Tokenizer
from k3.testing import assert_close
from k3.testing.oracle import mlx_logits
from k3.train.export import export, rounded_like_export
from k3.train.init import init_model
from k3.train.tokenizer import train_tokenizer
from train_helpers import CONFIG


def test_trained_tokenizer_round_trips_unicode(data_dir):
    tok = K3Tokenizer.load(data_dir / "tokenizer")
    assert tok.vocab_size == 768 and tok.end_of_msg_id == 514

    @settings(max_examples=200, deadline=None)
    @given(st.text(st.characters(blacklist_categories=("Cs",))))
    def round_trip(text):
        assert tok.decode(tok.encode(text)) == text

    round_trip()


def test_train_tokenizer_pads_to_the_requested_size():
    ranks = train_tokenizer(["tiny corpus"], vocab_size=600)
    assert sorted(ranks.values()) == list(range(344))


def test_export_loads_and_matches_the_model_in_memory(data_dir, tmp_path):
    model = init_model(CONFIG, seed=3)
    with torch.no_grad():   # move away from the zero AttnRes queries of init, so mixing matters
        for name, p in model.named_parameters():
            if name.endswith("_res_proj.weight"):
                p.normal_(0, 0.05)
    out = export(model, tmp_path / "m", tokenizer_dir=data_dir / "tokenizer")
    loaded = k3.load(out, dtype=torch.float32)
    assert (out / "tiktoken.model").is_file()
    assert type(loaded.model.layers[1].block_sparse_moe.experts).__name__ == "PackedExperts"
    ids = torch.randint(0, CONFIG.vocab_size, (2, 21), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = rounded_like_export(model)(ids)
    assert_close("export vs rounded in-memory model", loaded(ids), expected, 1e-5)
    assert_close("export vs mlx-lm", loaded(ids).numpy(), mlx_logits(out, ids.numpy()), 1e-4)
