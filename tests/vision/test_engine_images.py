"""Images through the engine: the rows spliced at prefill match the bare model's forward with pixel_values,
whatever the chunking; batchmates do not change a request's output; the prefix cache reuses the same image
and never a different one."""

from __future__ import annotations

import pytest
import torch

from images_support import encoded
from k3 import LLM, SamplingParams
from k3.media import prepare_image, stack_images
from k3.testing.tolerance import assert_close

GREEDY = SamplingParams(max_tokens=5, temperature=0.0, ignore_eos=True)


def _chat(text: str, *images: bytes) -> list[dict]:
    return [{"role": "user", "content": [{"type": "text", "text": text}] +
             [{"type": "image", "image": im} for im in images]}]


@pytest.fixture(scope="module")
def llm(vision_checkpoint):
    return LLM(vision_checkpoint, dtype=torch.float32, cache_memory="64MiB", max_num_batched_tokens=512)


@pytest.mark.parametrize("chunk", [5, 16, 512])
def test_prompt_logprobs_match_the_bare_forward_whatever_the_chunks(vision_checkpoint, llm, chunk):
    images = [encoded(size=(90, 50), noise=1), encoded(size=(40, 70), noise=2)]
    engine = LLM(llm.model, cache_memory="64MiB", max_num_batched_tokens=chunk, tokenizer=llm.tokenizer)
    out = engine.chat(_chat("two pictures:", *images), SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0))[0]
    ids = out.output.prompt_token_ids
    pixels, grid = stack_images([prepare_image(im) for im in images])
    logits = llm.model(torch.tensor([ids]), pixel_values=pixels, grid_thw=grid)[0]
    expected = torch.log_softmax(logits.double(), -1)[torch.arange(len(ids) - 1), torch.tensor(ids[1:])]
    got = torch.tensor([p.logprob for p in out.output.prompt_logprobs[1:]], dtype=torch.float64)
    assert_close(f"prompt logprobs, chunks of {chunk}", got, expected, 1e-5)
    assert out.output.token_ids[0] == int(logits[-1].argmax())


def test_the_image_changes_the_output_and_batchmates_do_not(llm):
    red, blue = encoded(noise=3), encoded(noise=4)
    alone = llm.chat(_chat("look", red), GREEDY)[0].output.token_ids
    crowd = llm.chat([_chat("look", red), _chat("other words here", blue), [{"role": "user", "content": "text"}],
                      _chat("look", blue)], GREEDY)
    assert crowd[0].output.token_ids == alone
    assert crowd[2].output.token_ids == llm.chat([{"role": "user", "content": "text"}], GREEDY)[0].output.token_ids
    red_rows = llm.model.encode_images(*stack_images([prepare_image(red)]))[0]
    blue_rows = llm.model.encode_images(*stack_images([prepare_image(blue)]))[0]
    assert (red_rows - blue_rows).abs().max() > 1e-3      # different images make different rows


def test_the_prefix_cache_reuses_the_same_image_and_never_another(llm):
    prefix = llm.engine.scheduler.prefix
    text = "a question about the picture that is long enough to fill a block or two of the cache: "
    first, other = encoded(size=(56, 56), noise=5), encoded(size=(56, 56), noise=6)
    # size, text and token count are equal: only the pixels differ
    before = prefix.counters["prefix_cache_hits"]
    for _ in range(3):
        reference = llm.chat(_chat(text, first), GREEDY)[0]
    same_hits = prefix.counters["prefix_cache_hits"] - before
    ids = reference.output.prompt_token_ids
    image_start = ids.index(533)
    assert same_hits > image_start + 4                                     # reused past the image's rows
    before = prefix.counters["prefix_cache_hits"]
    out = llm.chat(_chat(text, other), GREEDY)[0]
    assert prefix.counters["prefix_cache_hits"] - before <= image_start  # never past where the images differ
    fresh = LLM(llm.model, cache_memory="64MiB", tokenizer=llm.tokenizer, enable_prefix_caching=False)
    assert out.output.token_ids == fresh.chat(_chat(text, other), GREEDY)[0].output.token_ids


def test_requests_that_cannot_take_their_images_are_refused(vision_checkpoint, llm):
    pad = 533
    with pytest.raises(ValueError, match="no images were given"):
        llm.generate([[5, pad, 6]], GREEDY)
    with pytest.raises(ValueError, match="image pad tokens"):
        llm.engine.add_request([5, pad, 6], GREEDY, images=[prepare_image(encoded(size=(60, 60)))])
    text_only = LLM(vision_checkpoint, vision=False, cache_memory="64MiB")
    with pytest.raises(ValueError, match="no vision tower"):
        text_only.chat(_chat("x", encoded()), GREEDY)


def test_vllm_s_dict_prompt_puts_images_at_their_markers(llm):
    image = encoded(noise=7)
    via_dict = llm.generate({"prompt": "see <|kimi_image_placeholder|> here", "multi_modal_data": {"image": image}},
                            GREEDY)[0]
    block = prepare_image(image).block
    via_text = llm.tokenizer.encode("see " + block + " here", special=True)
    assert via_dict.prompt_token_ids == via_text
    with pytest.raises(ValueError, match="marks 1 image"):
        llm.generate({"prompt": "one <|kimi_image_placeholder|>", "multi_modal_data": {"image": [image, image]}})
    with pytest.raises(ValueError, match="images only"):
        llm.generate({"prompt": "x", "multi_modal_data": {"video": [image]}})
