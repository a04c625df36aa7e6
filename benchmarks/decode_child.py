"""One engine's batch-1 greedy decode as a child process the parent drives in chunks, so that engines can
take turns at the same moments (`interleaved.py`).

Loads the model, fills 64 tokens of context (compare.py's prompt), decodes 3 warm-up tokens and prints
"ready"; then for each line "N" on stdin decodes N tokens, each fed the argmax of the last logits, and
prints {"seconds": s} (the N tokens only, timed here, so the pipe's latency is not in it). An empty line
or EOF ends it.

    python benchmarks/decode_child.py {k3|k3:int8|llama.cpp|llama.cpp:no-repack} PATH THREADS [TOKENS]

k3 runs as compare.py's k3 child does (fp32 compute, inference mode, the model called a token at a time);
`k3:int8` loads it with its int8 trunk (trunk="int8").
llama.cpp runs through the bindings vendored with the source it was built from, with the context
parameters llama-bench uses for a `tg` test (llama.cpp's defaults: flash attention auto, f16 KV cache,
512-token batches, a context just large enough: 64 + 3 + TOKENS, default 4096 in all) and the same
llama_decode call per token; PATH is then the GGUF. `llama.cpp:no-repack` loads it without llama.cpp's
weight repacking (its extra buffer types), where the repacked form fails.
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np

PROMPT_LEN, WARM_UP = 64, 3
HELD: list = []   # what must live as long as the process (an inference-mode guard, a C log callback)


def prompt(vocab: int) -> list[int]:
    """compare.py's 64 prompt ids (below 30000), folded into a smaller vocabulary."""
    return (np.arange(PROMPT_LEN) * 7919 % 30000 % vocab).tolist()


def k3_stepper(path: str, threads: int, tokens: int, trunk: str | None = None):
    """(first token, step): step(tok) decodes tok and returns the next. k3's cache grows as it goes.
    trunk: k3.load's (None as stored, "int8")."""
    import torch

    import k3

    HELD.append(torch.inference_mode())   # entered for the process, as k3's engine runs the model
    HELD[-1].__enter__()
    torch.set_num_threads(threads)
    model = k3.load(path, trunk=trunk)
    state = model.new_state(1)
    first = int(model(torch.tensor([prompt(model.config.vocab_size)]), state, logits_to_keep=1)[0, -1].argmax())

    def step(tok: int) -> int:
        return int(model(torch.tensor([[tok]]), state)[0, -1].argmax())

    return first, step


def llama_cpp_stepper(path: str, threads: int, tokens: int, repack: bool = True):
    """(first token, step) through llama.cpp's C API: one llama_decode of a one-token batch per step.
    repack: llama.cpp's extra buffer types (its weight repacking; llama-bench's --repack)."""
    from k3.testing.llama_cpp.run import bindings

    ll = bindings()
    HELD.append(ll.llama_log_callback(lambda level, text, data: None))   # outlives every call that may log
    ll.llama_log_set(HELD[-1], None)
    ll.llama_backend_init()
    model_params = ll.llama_model_default_params()
    model_params.use_extra_bufts = repack
    model = ll.llama_model_load_from_file(path.encode(), model_params)
    if not model:
        raise RuntimeError(f"llama.cpp could not load {path}")
    params = ll.llama_context_default_params()
    params.n_ctx, params.n_batch, params.n_ubatch = PROMPT_LEN + WARM_UP + tokens, 512, 512
    params.n_threads = params.n_threads_batch = threads
    ctx = ll.llama_init_from_model(model, params)
    if not ctx:
        raise RuntimeError("llama.cpp could not create a context")
    n_vocab = ll.llama_vocab_n_tokens(ll.llama_model_get_vocab(model))

    def run(ids: list[int]) -> int:
        batch = (ll.llama_token * len(ids))(*ids)
        if ll.llama_decode(ctx, ll.llama_batch_get_one(batch, len(ids))) != 0:
            raise RuntimeError("llama_decode failed (context full?)")
        ll.llama_synchronize(ctx)
        return int(np.ctypeslib.as_array(ll.llama_get_logits_ith(ctx, -1), shape=(n_vocab,)).argmax())

    return run(prompt(n_vocab)), lambda tok: run([tok])


def serve(step, tok: int, commands=sys.stdin, out=sys.stdout) -> None:
    """The protocol above: warm up, say "ready", then one timed turn per command line."""
    for _ in range(WARM_UP):
        tok = step(tok)
    print("ready", file=out, flush=True)
    for line in commands:
        if not line.strip():
            break
        n = int(line)
        t0 = time.perf_counter()
        for _ in range(n):
            tok = step(tok)
        print(json.dumps({"seconds": time.perf_counter() - t0}), file=out, flush=True)


def main() -> None:
    engine, path, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
    tokens = int(sys.argv[4]) if len(sys.argv) > 4 else 4096 - PROMPT_LEN - WARM_UP
    steppers = {"k3": k3_stepper, "k3:int8": lambda *a: k3_stepper(*a, trunk="int8"), "llama.cpp": llama_cpp_stepper,
                "llama.cpp:no-repack": lambda *a: llama_cpp_stepper(*a, repack=False)}
    if engine not in steppers:
        sys.exit(f"unknown engine {engine!r}: expected one of {sorted(steppers)}")
    tok, step = steppers[engine](path, threads, tokens)
    serve(step, tok)


if __name__ == "__main__":
    main()
