"""The bundled default model: official layout, MXFP4 experts, its own tokenizer, and trained weights."""

import math

import torch

import k3
from k3.chat import K3Tokenizer
from k3.cli.main import main
from k3.defaults import default_model

# Not in the training data: the model must still find it far likelier than chance (ln 4096 = 8.3 nats).
HELD_OUT = ("She walked slowly along the river, thinking of the letter she had received that morning, "
            "and wondering whether her sister would forgive her for what she had said.")


def test_layout_and_components():
    model = k3.load(default_model())
    c = model.config
    assert c.expert_format == "mxfp4" and c.attn_res_block_size is not None
    assert set(c.layer_types) == {"kda", "mla"} and c.layer_types[-1] == "mla" and c.num_shared_experts > 0
    assert type(model.model.layers[1].block_sparse_moe.experts).__name__ == "PackedExperts"
    assert K3Tokenizer.load(default_model()).vocab_size == c.vocab_size


def test_weights_are_trained():
    model = k3.load(default_model(), dtype=torch.float32)
    tok = K3Tokenizer.load(default_model())
    ids = torch.tensor([tok.encode(HELD_OUT)])
    with torch.no_grad():
        logits = model(ids)
    loss = torch.nn.functional.cross_entropy(logits[0, :-1], ids[0, 1:])
    assert float(loss) < 0.7 * math.log(c_vocab := model.config.vocab_size), (float(loss), math.log(c_vocab))


def test_generate_uses_it_without_model_flag(capsys):
    assert main(["generate", "--prompt", "It is a truth", "--max-tokens", "5", "--ignore-eos",
                 "--cache-memory", "16MiB"]) == 0
    assert "generated 5" in capsys.readouterr().err
