"""k3 demo: a random-weight checkpoint in the official layout -> inspect -> load -> forward pass.

Until a trained default model ships, the demo exercises the real loading and model code on
random weights and says so: the tokens it prints are meaningless.
"""

from __future__ import annotations

import time


def add_arguments(p) -> None:
    p.add_argument("--out", default="demo-checkpoint", help="where to write the random checkpoint")
    p.add_argument("--preset", default="tiny-vision",
                   help="checkpoint size (tiny-vision: tiny-chat with a vision tower; tiny-chat, tiny7, mid)")
    p.add_argument("--tokens", type=int, default=24, help="prompt length for the forward pass")


PROMPTS = ("It is a truth universally acknowledged, that", "In the beginning", "The committee said that")


def _default_model() -> None:
    from k3.defaults import default_model
    from k3.engine import LLM, SamplingParams

    try:
        path = default_model()
    except FileNotFoundError as e:
        print(f"== (no bundled default model: {e})")
        return
    t0 = time.perf_counter()
    llm = LLM(str(path), max_num_seqs=len(PROMPTS), cache_memory="64MiB")
    print(f"== the bundled default model ({path.name}: a small K3-architecture model trained on English prose,"
          f" MXFP4 experts), loaded in {time.perf_counter() - t0:.2f} s")
    params = [SamplingParams(max_tokens=48, temperature=0.8, top_p=0.95, seed=i) for i in range(len(PROMPTS))]
    for prompt, out in zip(PROMPTS, llm.generate(list(PROMPTS), params)):
        print(f"\n> {prompt}{out.text}")
    print()


def run(args) -> int:
    import torch

    _default_model()

    import k3
    from k3.engine import LLM, SamplingParams
    from k3.cli.target import resolve_config
    from k3.testing import make_checkpoint
    from k3.testing.checkpoint import pairs_with_tokenizer
    from k3.tools.inspect import format_summary, summarize

    config, _, name = resolve_config(args.preset)
    print(f"== writing a RANDOM-WEIGHT K3-architecture checkpoint ({name}) to {args.out}")
    with_tokenizer = pairs_with_tokenizer(config)
    make_checkpoint(args.out, config, seed=0, tokenizer=with_tokenizer)
    print(format_summary(args.out, config, summarize(config, args.out)))
    t0 = time.perf_counter()
    model = k3.load(args.out)
    t1 = time.perf_counter()
    ids = torch.randint(0, config.vocab_size, (1, args.tokens), generator=torch.Generator().manual_seed(0))
    if config.vision is not None:      # an image's pad id claims an image's rows: none in a text prompt
        ids = torch.where(ids == config.vision.media_pad_id, 0, ids)
    with torch.inference_mode():
        logits = model(ids)
        state = model.new_state()
        model(ids[:, :-1], state)
        last = model(ids[:, -1:], state)
    t2 = time.perf_counter()
    err = (last[0, -1] - logits[0, -1]).norm() / logits[0, -1].norm()
    print("\n== forward pass (random weights: the output means nothing)")
    print(f"loaded in {t1 - t0:.2f} s; forward of {args.tokens} tokens + cached replay in {t2 - t1:.2f} s")
    print(f"logits {list(logits.shape)} {logits.dtype}; greedy next-token ids: {logits[0].argmax(-1).tolist()[:12]} ...")
    print(f"cached decode of the last token vs full forward: relative error {err:.2e}")
    llm = LLM(model, max_num_seqs=4, cache_memory="64MiB", tokenizer=args.out if with_tokenizer else None)
    prompts = [ids[0, :n].tolist() for n in (3, 9, 17, 24)]
    t3 = time.perf_counter()
    outs = llm.generate(prompts, SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True))
    t4 = time.perf_counter()
    print(f"\n== k3.LLM: 4 prompts (3-24 tokens) x 8 greedy tokens, continuous batching, {t4 - t3:.2f} s")
    for p, o in zip(prompts, outs):
        print(f"prompt {len(p):>2} tokens -> {o.token_ids} ({o.finish_reason})")
    if llm.tokenizer is None:
        return 0
    _chat(llm)
    if config.vision is not None:
        _image_chat(llm)
    return 0


def _image_chat(llm) -> None:
    """An image in a chat, as a user sends one: a 640x480 picture made here, its block of image tokens."""
    import io

    from k3.engine import SamplingParams

    try:
        from PIL import Image
    except ImportError:
        print("\n== (an image chat needs Pillow: pip install 'k3[vision]')")
        return

    buf = io.BytesIO()
    Image.linear_gradient("L").resize((640, 480)).convert("RGB").save(buf, "PNG")
    messages = [{"role": "user", "content": [{"type": "text", "text": "What is in this picture?"},
                                             {"type": "image", "image": buf.getvalue()}]}]
    t0 = time.perf_counter()
    out = llm.chat(messages, SamplingParams(max_tokens=8, temperature=0.0))[0]
    print(f"\n== an image in a chat: a 640x480 PNG becomes {len(out.output.prompt_token_ids)} prompt tokens (its "
          f"image rows through the tower), answered in {time.perf_counter() - t0:.2f} s (random weights)")


def _chat(llm) -> None:
    from k3.chat import render, to_text
    from k3.engine import SamplingParams

    messages = [{"role": "user", "content": "What is the capital of France?"}]
    print("\n== k3.chat: the conversation rendered as K3 XTML (tokenizer trained on a sample, not K3's)")
    print(to_text(render(messages)))
    out = llm.chat(messages, SamplingParams(max_tokens=16, temperature=0.0))[0]
    print(f"generated {len(out.output.token_ids)} tokens ({out.output.finish_reason}); parsed: "
          f"reasoning {out.message.reasoning_content[:40]!r}..., content {out.message.content[:40]!r}")
    print(f"parser problems (expected with random weights): {out.message.problems}")
