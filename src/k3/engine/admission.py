"""What a request must satisfy before the engine admits it: each failure a ValueError naming the field and
the fix. The engine's own state is only read here (vocabulary, holes, lengths, the cache's size)."""

from __future__ import annotations

from k3.engine.images import PromptImages
from k3.engine.request import SamplingParams
from k3.engine.state_file import check_resumable, state_key


def check(engine, prompt_ids, params: SamplingParams, resume_state=None) -> list[int]:
    """The prompt as a list of ids, or ValueError: ids the engine cannot hold or decode, a logit_bias on such
    ids, a resume state that does not begin the prompt, stop strings without a tokenizer, a length past
    max_model_len or past what the cache can ever hold."""
    prompt = _prompt(engine, prompt_ids)
    biased = [t for t, _ in params.logit_bias or () if t >= engine.usable_vocab]
    if biased:
        raise ValueError(f"SamplingParams.logit_bias: token ids must be below {engine.usable_vocab}, got {biased[:5]}")
    if resume_state is not None:
        check_resumable(resume_state, prompt)
    if params.stop and engine.tokenizer is None:
        raise ValueError("SamplingParams.stop: stop strings need a tokenizer to detokenize; "
                         "use stop_token_ids, or give the engine a tokenizer")
    total = len(prompt) + params.max_tokens
    if total > engine.max_model_len:
        raise ValueError(f"SamplingParams.max_tokens: prompt ({len(prompt):,}) + max_tokens ({params.max_tokens:,}) "
                         f"is {total:,} tokens, over max_model_len ({engine.max_model_len:,}); shorten the prompt "
                         "or lower max_tokens")
    if not engine.allocator.fits_ever(total):
        raise ValueError(f"SamplingParams.max_tokens: prompt ({len(prompt)}) + max_tokens ({params.max_tokens}) "
                         f"needs {total:,} cached tokens, more than the cache holds "
                         f"({engine.capacity.max_cached_tokens:,}); lower max_tokens or raise cache_memory")
    return prompt


def check_images(engine, prompt: list[int], images, resume_state, save_state_path) -> PromptImages | None:
    """A request's images placed in its prompt, or None; ValueError where they cannot be, or where the state
    it would save could not be signed."""
    vision = getattr(engine.model, "vision", None)
    if not images and vision is not None and vision.media_pad_id in prompt:
        raise ValueError(f"prompt: holds image pad tokens (id {vision.media_pad_id}) but no images were given")
    if save_state_path is not None:
        state_key()    # an unusable signing key fails the request now, not once its tokens are generated
    if not images:
        return None
    if vision is None:
        raise ValueError("images: this model has no vision tower (its checkpoint has none, or it was loaded with "
                         "vision=False / --no-vision); send text only")
    if resume_state is not None or save_state_path is not None:
        raise ValueError("images: saving or resuming a sequence's state is for text prompts; leave out "
                         "save_state/resume_from")
    return PromptImages.place(prompt, list(images), vision.media_pad_id)


def _prompt(engine, prompt_ids) -> list[int]:
    ids = list(prompt_ids)
    if not ids:
        raise ValueError("prompt: needs at least one token id")
    bad = [t for t in ids if not isinstance(t, int) or isinstance(t, bool) or not 0 <= t < engine.usable_vocab]
    if bad:
        raise ValueError(f"prompt: token ids must be integers in [0, {engine.usable_vocab}), got {bad[:5]}")
    holes = engine.holes.intersection(ids) if engine.holes else ()
    if holes:
        raise ValueError(f"prompt: token ids {sorted(holes)[:5]} are not in the tokenizer's vocabulary")
    return ids


def max_model_len(asked: int | None, capacity, config) -> int:
    """The longest prompt + completion one request may have: `asked`, checked against the cache and the model."""
    most = min(config.max_position_embeddings, capacity.max_cached_tokens or config.max_position_embeddings)
    if asked is None:
        return most
    if asked > config.max_position_embeddings:
        raise ValueError(f"max_model_len={asked:,} is past the model's max_position_embeddings "
                         f"({config.max_position_embeddings:,}, from its config.json); ask for at most that")
    if asked > most:
        need = capacity.max_seqs * capacity.slot_bytes + (asked + capacity.block_size) * capacity.token_bytes
        raise ValueError(f"max_model_len={asked:,} is more than the sequence-state cache holds for one sequence "
                         f"({most:,} tokens at {capacity.token_bytes:,} B/token): raise cache_memory (--cache-memory) "
                         f"to at least {-(-need // 2 ** 20):,}MiB, or ask for at most {most:,}")
    return asked
