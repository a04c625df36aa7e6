"""/v1/completions with batched prompts (OpenAI's list form, which lm-eval sends), and the
remote-tokenizer routes (/tokenizer_info, /tokenize) as vLLM serves them."""

import httpx
import openai

from serve_helpers import MODEL


def test_batched_prompts_equal_their_requests_alone(base, llm):
    client = openai.OpenAI(base_url=base + "/v1", api_key="none", max_retries=0)
    prompts = ["It is a truth", "Once upon a time", "The king said"]
    alone = [client.completions.create(model=MODEL, prompt=p, max_tokens=5, temperature=0, n=2, echo=True, logprobs=1)
             for p in prompts]
    batch = client.completions.create(model=MODEL, prompt=prompts, max_tokens=5, temperature=0, n=2, echo=True,
                                      logprobs=1)
    assert [c.index for c in batch.choices] == list(range(6))
    for i, one in enumerate(alone):
        for j in range(2):
            got, want = batch.choices[2 * i + j], one.choices[j]
            assert (got.text, got.logprobs.token_logprobs) == (want.text, want.logprobs.token_logprobs)
    assert batch.usage.prompt_tokens == sum(a.usage.prompt_tokens for a in alone)
    assert batch.usage.completion_tokens == sum(a.usage.completion_tokens for a in alone) == 30
    as_ids = client.completions.create(model=MODEL, prompt=[llm.tokenizer.encode(p, special=True) for p in prompts],
                                       max_tokens=5, temperature=0, n=2)
    assert [c.text for c in as_ids.choices] == [c.text[len(prompts[c.index // 2]):] for c in batch.choices]


def test_batched_prompts_that_cannot_run_are_refused_whole(base):
    def post(body):
        return httpx.post(base + "/v1/completions", json={"model": MODEL, "max_tokens": 2} | body)

    for prompt in ([], ["x"] * 65):
        r = post({"prompt": prompt})
        assert r.status_code == 400 and "1 to 64 prompts" in r.json()["error"]["message"]
    r = post({"prompt": ["a", "b"], "stream": True})
    assert r.status_code == 400 and "without stream" in r.json()["error"]["message"]
    r = post({"prompt": ["fine", "x" * 200_000]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "prompt"


def test_tokenizer_info_and_tokenize_serve_a_remote_tokenizer(base, llm):
    info = httpx.get(base + "/tokenizer_info").json()
    tok = llm.tokenizer
    names = {i: n for n, i in tok.specials.items()}
    assert info["eos_token"] == names[llm.engine.eos_token_id] and info["tokenizer_vocab_size"] == tok.vocab_size
    assert info["vocab_size"] == llm.engine.model.config.vocab_size     # the model's: the logits' width (issue 69)
    assert info["model_max_length"] == llm.engine.max_model_len
    for flag in (True, False):  # special names are their ids either way, as /v1/completions reads a prompt
        r = httpx.post(base + "/tokenize", json={"prompt": info["eos_token"] + " hi", "add_special_tokens": flag})
        assert r.json()["tokens"] == tok.encode(info["eos_token"] + " hi", special=True)
        assert r.json()["tokens"][0] == llm.engine.eos_token_id
