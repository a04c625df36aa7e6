"""Prompts with images for the offline API: chat messages with image parts, and vLLM's dict prompts
`{"prompt": TEXT, "multi_modal_data": {"image": IMAGE or [IMAGES]}}` whose text marks each image's place
with `<|kimi_image_placeholder|>` (K3's own processor marker). Images are prepared here (k3.media) with the
checkpoint's preprocessing, under the caller's limits."""

from __future__ import annotations

from dataclasses import dataclass

from k3.media import ImageError, ImageLimits, prepare_image
from k3.media.image import measure
from k3.media.sources import image_bytes_or_object

PLACEHOLDER = "<|kimi_image_placeholder|>"


@dataclass
class Prompt:
    ids: list[int]
    images: list | None = None     # PreparedImage's, in prompt order


def prepare_all(sources: list, media, limits: ImageLimits, *, local_root=None, trusted: bool = True) -> list:
    """Each source (bytes, path, PIL image, data: URL) -> a PreparedImage; ImageError names the image. Every
    image's header is read and checked, and the prompt's image tokens counted, before any is decoded."""
    if len(sources) > limits.max_images:
        raise ImageError(f"{len(sources)} images in one prompt, over the limit of {limits.max_images}")
    measured = [_each(i, len(sources), lambda: measure(image_bytes_or_object(src, local_root=local_root,
                                                                            trusted=trusted), media, limits))
                for i, src in enumerate(sources)]
    tokens = sum(m[3] for m in measured)
    if tokens > limits.max_image_tokens:
        raise ImageError(f"the images take {tokens:,} image tokens together, over the limit of "
                         f"{limits.max_image_tokens:,} a prompt; send fewer or smaller images")
    return [_each(i, len(sources), lambda: prepare_image(m[0], media, limits)) for i, m in enumerate(measured)]


def _each(i: int, n: int, work):
    try:
        return work()
    except ImageError as e:
        raise ImageError(f"image {i + 1} of {n}: {e}") from None


def dict_prompt(tok, prompt: dict, media, limits: ImageLimits) -> Prompt:
    """vLLM's {"prompt": ..., "multi_modal_data": {"image": ...}} -> ids with each marker replaced by its image's block."""
    text = prompt.get("prompt")
    if not isinstance(text, str):
        raise ValueError("a dict prompt needs 'prompt' (text with one <|kimi_image_placeholder|> per image)")
    data = prompt.get("multi_modal_data") or {}
    unknown = sorted(set(data) - {"image"})
    if unknown:
        raise ValueError(f"multi_modal_data: {unknown} not supported; K3 takes images only")
    sources = data.get("image", [])
    sources = list(sources) if isinstance(sources, (list, tuple)) else [sources]
    pieces = text.split(PLACEHOLDER)
    if len(pieces) - 1 != len(sources):
        raise ValueError(f"the prompt marks {len(pieces) - 1} image place(s) with {PLACEHOLDER} but "
                         f"multi_modal_data has {len(sources)} image(s)")
    images = prepare_all(sources, media, limits)
    ids = tok.encode(pieces[0], special=True)
    for image, piece in zip(images, pieces[1:]):
        ids += tok.encode(image.block, special=True) + tok.encode(piece, special=True)
    return Prompt(ids, images or None)
