"""`k3 eval` end to end: against a real k3 server over loopback, and on the bundled local model."""

from __future__ import annotations

import json

import httpx
import pytest
import torch

from k3 import LLM
from k3.cli.main import main
from k3.defaults import default_model
from k3.eval.backends.local import LocalBackend
from k3.testing.serving import serving


@pytest.fixture(scope="module")
def server_url():
    llm = LLM(str(default_model()), max_num_seqs=4, cache_memory="64MiB")
    with serving(llm) as url:
        yield url


def _last_json(capsys) -> dict:
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_endpoint_run_writes_reports_and_resumes(server_url, tmp_path, capsys):
    argv = ["eval", "--endpoint", server_url, "--tasks", "refusal,constraints", "--limit", "2", "--max-tokens", "12",
            "--constraint-lengths", "0,1", "--output", str(tmp_path), "--no-progress"]
    assert main(argv) == 0
    summary = _last_json(capsys)
    assert set(summary["scores"]) == {"refusal", "constraints"} and summary["model"] == "default-model"
    report = json.loads((tmp_path / "report.json").read_text())
    recs = report["tasks"]["refusal"]["records"]
    assert len(recs) == 2 and all(r["finish_reason"] in ("stop", "length") for r in recs)
    assert all(r["truncated"] == (r["finish_reason"] == "length") for r in recs)
    answers = (tmp_path / "answers.jsonl").read_text()
    assert main(argv) == 0  # everything cached: same report, nothing new asked
    assert _last_json(capsys) == summary
    assert (tmp_path / "answers.jsonl").read_text() == answers
    assert json.loads((tmp_path / "report.json").read_text()) == report


def test_endpoint_likelihoods_equal_the_local_model(server_url, tmp_path, capsys):
    """k3 serve scores prompts (completions with echo + logprobs); the same text scored through the
    endpoint and in-process gives the same numbers."""
    text = tmp_path / "t.txt"
    text.write_text("The cat sat on the mat.\n\nA second short document, a little longer than the first one.\n")
    mc = tmp_path / "mc.jsonl"
    mc.write_text('{"question": "The cat sat on the", "choices": ["mat.", "moon and the stars"], "answer": 0}\n')
    spec = f"perplexity:{text},mc:{mc}"
    assert main(["eval", "--endpoint", server_url, "--tasks", spec, "--output", str(tmp_path / "e"), "--no-progress"]) == 0
    remote = json.loads((tmp_path / "e" / "report.json").read_text())["tasks"]
    assert main(["eval", "--model", str(default_model()), "--tasks", spec, "--output", str(tmp_path / "l"),
                 "--no-progress"]) == 0
    local = json.loads((tmp_path / "l" / "report.json").read_text())["tasks"]
    capsys.readouterr()
    r, l_ = remote["perplexity:t.txt"]["scores"], local["perplexity:t.txt"]["scores"]
    assert r["tokens"] == l_["tokens"] and r["perplexity"] == pytest.approx(l_["perplexity"], rel=1e-4)
    r_ll = remote["mc:mc.jsonl"]["records"][0]["loglikelihoods"]
    assert r_ll == pytest.approx(local["mc:mc.jsonl"]["records"][0]["loglikelihoods"], rel=1e-4)


def test_endpoint_without_prompt_logprobs_fails_clearly(tmp_path):
    from k3.eval.backends.base import LoglikUnsupported
    from k3.eval.backends.openai import OpenAIBackend

    def handler(request: httpx.Request) -> httpx.Response:  # a server that ignores echo/logprobs
        return httpx.Response(200, json={"choices": [{"text": "x", "finish_reason": "length"}]})

    backend = OpenAIBackend("http://fake", model="m", transport=httpx.MockTransport(handler))
    with pytest.raises(LoglikUnsupported, match="prompt logprobs.*--model PATH"):
        backend.loglikelihood("2+2=", " 4")


def test_judge_must_be_another_model(server_url, tmp_path, capsys):
    assert main(["eval", "--endpoint", server_url, "--judge", server_url, "--tasks", "refusal", "--limit", "1",
                 "--output", str(tmp_path), "--no-progress"]) == 2
    assert "different model" in capsys.readouterr().err


def test_local_model_likelihood_tasks(tmp_path, capsys):
    text = tmp_path / "t.txt"
    text.write_text("The cat sat on the mat.\n\nA second short document.\n")
    mc = tmp_path / "mc.jsonl"
    mc.write_text('{"question": "The cat sat on the", "choices": ["mat.", "xylophone quantum"], "answer": 0}\n')
    assert main(["eval", "--model", str(default_model()), "--tasks", f"perplexity:{text},mc:{mc}",
                 "--output", str(tmp_path / "o"), "--no-progress"]) == 0
    scores = _last_json(capsys)["scores"]
    ppl = scores["perplexity:t.txt"]
    assert 0 < ppl["bits_per_byte"] < 20 and ppl["perplexity"] > 1
    assert scores["mc:mc.jsonl"]["acc"] in (0.0, 1.0)


def test_local_loglikelihood_equals_the_model_logits():
    backend = LocalBackend(default_model(), cache_memory="8MiB")
    tok = backend.llm.tokenizer
    ctx, cont = tok.encode("Hello there"), tok.encode(" world")
    with torch.no_grad():
        logits = backend.llm.model(torch.tensor([ctx + cont])).float()[0]
    lp = torch.log_softmax(logits, -1)
    expected = sum(float(lp[len(ctx) - 1 + i, t]) for i, t in enumerate(cont))
    got, n = backend.loglikelihood("Hello there", " world")
    assert n == len(cont) and got == pytest.approx(expected, rel=1e-5)
    backend.window = 3  # windows overlap; each token still sees up to `window` earlier tokens
    total, count = backend.loglikelihood_rolling("one two three four five six seven")
    assert count == len(tok.encode("one two three four five six seven")) - 1 and math_finite(total)


def math_finite(x: float) -> bool:
    return x == x and abs(x) != float("inf")
