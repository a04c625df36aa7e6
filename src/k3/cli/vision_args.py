"""`k3 serve`'s limits on a request's images (vLLM's flag names where vLLM has one); whether the tower loads
at all is an engine flag (--no-vision, cli/engine_args.py)."""

from __future__ import annotations

import json


def add_image_limit_arguments(p) -> None:
    p.add_argument("--limit-mm-per-prompt", metavar="JSON", default=None,
                   help='images one request may carry, as vLLM takes it: \'{"image": 4}\' (default 16)')
    p.add_argument("--allowed-local-media-path", metavar="DIR",
                   help="a directory requests may name image files in (file:// or a path); without it, data: URLs only")
    p.add_argument("--max-image-bytes", type=int, default=32 * 2 ** 20, help="an image's encoded size, at most")
    p.add_argument("--max-image-pixels", type=int, default=80_000_000,
                   help="an image's width x height as its header states it, at most (checked before decoding)")
    p.add_argument("--max-image-tokens", type=int, default=65_536,
                   help="image tokens one request's images take together, at most (an image at the released "
                        "processor's largest takes 16,384)")


def add_image_work_arguments(p) -> None:
    p.add_argument("--image-workers", type=int, default=1,
                   help="threads that decode and prepare images, apart from text work and at a lower priority")
    p.add_argument("--image-queue", type=int, default=4,
                   help="requests whose images may wait for a worker; more get a 429 at once")


def image_work(args):
    from k3.serve.image_work import ImageWork

    return ImageWork(args.image_workers, args.image_queue)


def image_limits(args):
    from k3.media import ImageLimits

    for flag, value in (("--max-image-bytes", args.max_image_bytes), ("--max-image-pixels", args.max_image_pixels),
                        ("--max-image-tokens", args.max_image_tokens)):
        if value < 1:
            raise ValueError(f"{flag} must be at least 1, got {value}")
    limits = ImageLimits(max_bytes=args.max_image_bytes, max_pixels=args.max_image_pixels,
                         max_image_tokens=args.max_image_tokens)
    if args.limit_mm_per_prompt is None:
        return limits
    try:
        given = json.loads(args.limit_mm_per_prompt)
    except json.JSONDecodeError:
        raise ValueError(f"--limit-mm-per-prompt {args.limit_mm_per_prompt!r}: expected JSON such as "
                         '\'{"image": 4}\'') from None
    if not isinstance(given, dict) or set(given) - {"image", "video"} or not all(
            isinstance(v, int) and v >= 0 for v in given.values()):
        raise ValueError('--limit-mm-per-prompt: expected {"image": N} with N >= 0 (K3 takes images only)')
    if given.get("video"):
        raise ValueError("--limit-mm-per-prompt: K3's released processor takes no video; leave video out or at 0")
    from dataclasses import replace

    return replace(limits, max_images=given.get("image", limits.max_images))
