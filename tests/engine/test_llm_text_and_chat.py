"""k3.LLM with a tokenizer: text prompts, `text` output, stop strings, and chat (render -> generate -> parse)."""

import pytest
import torch

import k3
from k3.chat import K3Tokenizer, render
from k3.config.presets import tiny_chat
from k3.engine import LLM, SamplingParams
from k3.testing import make_checkpoint
from k3.testing.scripted import ScriptedModel

GREEDY = dict(temperature=0.0, ignore_eos=True)


@pytest.fixture(scope="module")
def chat_checkpoint(tmp_path_factory):
    return make_checkpoint(tmp_path_factory.mktemp("chat"), tiny_chat(), seed=2, tokenizer=True)


@pytest.fixture(scope="module")
def llm(chat_checkpoint):
    return LLM(str(chat_checkpoint), dtype=torch.float32, cache_memory="16MiB")


def test_tokenizer_comes_with_the_checkpoint(llm):
    assert isinstance(llm.tokenizer, K3Tokenizer) and llm.tokenizer.vocab_size == 768


def test_text_prompt_and_text_output(llm):
    out = llm.generate("Hello <|open|>", SamplingParams(max_tokens=10, **GREEDY))[0]
    assert out.prompt_token_ids == llm.tokenizer.encode("Hello <|open|>", special=True)
    visible = [t for t in out.token_ids if t not in llm.tokenizer.special_ids]
    assert out.text == llm.tokenizer.decode(visible)
    raw = llm.generate("Hello <|open|>", SamplingParams(max_tokens=10, skip_special_tokens=False, **GREEDY))[0]
    assert raw.text == llm.tokenizer.decode(raw.token_ids)


def test_streamed_text_only_grows(llm):
    texts = [o.text for o in llm.stream("abc", SamplingParams(max_tokens=12, **GREEDY))]
    assert all(b.startswith(a) for a, b in zip(texts, texts[1:]))


def test_stop_string_cuts_the_text(llm):
    full = llm.generate("The quick", SamplingParams(max_tokens=16, skip_special_tokens=False, **GREEDY))[0]
    stop = full.text[5:8]
    assert stop and full.text.find(stop) >= 0
    cut = llm.generate("The quick", SamplingParams(max_tokens=16, stop=[stop], skip_special_tokens=False, **GREEDY))[0]
    assert cut.finish_reason == "stop" and cut.text == full.text[:full.text.find(stop)]


def test_chat_on_random_weights_never_raises(llm):
    outs = llm.chat([[{"role": "user", "content": "hi"}], [{"role": "user", "content": "yo"}]],
                    SamplingParams(max_tokens=6, **GREEDY))
    assert len(outs) == 2 and all(o.message.problems for o in outs)   # random tokens: cut off, reported


def test_chat_parses_the_generated_message(llm):
    tok = llm.tokenizer
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    reply = {"role": "assistant", "reasoning_content": "Look it up.", "content": "",
             "tool_calls": [{"id": "x", "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}}]}
    head = tok.encode_segments(render([]))
    script = tok.encode_segments(render([reply], add_generation_prompt=False))[len(head):]
    chat_llm = LLM(ScriptedModel(script, tok.vocab_size, tok.end_of_msg_id), tokenizer=tok, cache_memory="1MiB")
    out = chat_llm.chat([{"role": "user", "content": "Weather in Paris?"}], SamplingParams(max_tokens=200, temperature=0),
                        tools=tools)[0]
    assert out.output.finish_reason == "stop" and out.output.token_ids[-1] == tok.end_of_msg_id
    m = out.message
    assert (m.reasoning_content, m.content, m.problems, m.ended) == ("Look it up.", "", [], True)
    assert [(c.name, c.arguments_json()) for c in m.tool_calls] == [("get_weather", {"city": "Paris", "days": 2})]
    openai = m.to_openai()
    assert openai["content"] is None and openai["tool_calls"][0]["function"]["name"] == "get_weather"


def test_text_and_chat_need_a_tokenizer(tiny_checkpoint):
    plain = LLM(str(tiny_checkpoint), cache_memory="8MiB")
    with pytest.raises(ValueError, match="text prompts: needs a tokenizer"):
        plain.generate("hi")
    with pytest.raises(ValueError, match="chat: needs a tokenizer"):
        plain.chat([{"role": "user", "content": "hi"}])
    assert k3.LLM is LLM
