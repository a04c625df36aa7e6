"""One naming scheme for models (k3/models.py), the same in every command and in Python: a path, `default`
(the bundled model), a Hugging Face repo id (downloaded by `k3 download ORG/NAME` from HF_ENDPOINT with
HF_TOKEN, or found in the hub cache), or a preset where only a configuration is needed."""

import json

import pytest

import k3
from k3.cli.main import main
from k3.config.presets import tiny_chat
from k3.models import ModelNotFound, resolve_model
from k3.testing import make_checkpoint
from k3.testing.http_mirror import Mirror


def test_default_names_the_bundled_model_everywhere(capsys):
    assert k3.default_model() == resolve_model("default") == resolve_model(None)
    assert main(["inspect", "default"]) == 0
    assert "layers" in capsys.readouterr().out


@pytest.mark.parametrize("command", [["generate", "--model", "k3", "hi"], ["serve", "k3"], ["chat", "k3"]])
def test_a_preset_is_refused_where_weights_run_with_what_to_use(command, capsys):
    assert main(command) == 2
    err = capsys.readouterr().err
    assert "'k3' is a preset" in err and "k3 download moonshotai/Kimi-K3" in err and "'default'" in err


def test_a_missing_path_says_what_a_model_reference_is(tmp_path):
    with pytest.raises(ModelNotFound, match="give a checkpoint directory, a Hugging Face repo id"):
        resolve_model(tmp_path / "nope")
    with pytest.raises(ModelNotFound, match="k3 download acme/none"):
        resolve_model("acme/none")


def test_a_known_repo_id_plans_before_it_is_downloaded(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("K3_MODELS_DIR", str(tmp_path))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    assert main(["plan", "moonshotai/Kimi-K3", "--memory-budget", "64GB", "--disk-bandwidth", "3GB",
                 "--memory-bandwidth", "40GB", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["mode"] == "stream-trunk"


def test_download_a_repo_id_from_hf_endpoint_then_run_it_by_that_id(tmp_path, monkeypatch, capsys):
    source = make_checkpoint(tmp_path / "src", tiny_chat(), tokenizer=True)
    monkeypatch.setenv("K3_MODELS_DIR", str(tmp_path / "models"))
    monkeypatch.setenv("HF_TOKEN", "hf_secret")
    with Mirror(source) as mirror:
        monkeypatch.setenv("HF_ENDPOINT", mirror.url.split("/repo/")[0])
        assert main(["download", "acme/tiny-k3"]) == 0
    assert all(path.startswith("/acme/tiny-k3/resolve/main/") for path, _ in mirror.seen)
    assert {auth for _, auth in mirror.seen} == {"Bearer hf_secret"}
    assert (tmp_path / "models" / "acme" / "tiny-k3" / "config.json").is_file()
    capsys.readouterr()
    assert main(["inspect", "acme/tiny-k3"]) == 0
    assert "acme/tiny-k3" in capsys.readouterr().out
    llm = k3.LLM("acme/tiny-k3", cache_memory="8MiB")
    assert llm.tokenizer is not None and len(llm.generate([[1, 2, 3]], k3.SamplingParams(max_tokens=2))[0].token_ids) == 2


def test_the_hub_cache_is_found_by_repo_id(tmp_path, monkeypatch):
    hub = tmp_path / "hf" / "hub" / "models--acme--cached"
    make_checkpoint(hub / "snapshots" / "abc123", tiny_chat())
    (hub / "refs").mkdir()
    (hub / "refs" / "main").write_text("abc123")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("K3_MODELS_DIR", str(tmp_path / "models"))
    assert resolve_model("acme/cached") == hub / "snapshots" / "abc123"
