"""Image parts in chat messages, as OpenAI's API, vLLM and K3's own processor take them (vision spec §7.2):
`{"type": "image_url", "image_url": {"url": ...}}`, `{"type": "input_image", "image_url": ...}`, or
`{"type": "image", "image": ...}` (a path, bytes or a PIL image, in Python). Images come from user messages
only, in document order; video is refused (the released processor is image-only, section 8)."""

from __future__ import annotations

from k3.chat.segments import ChatFormatError

IMAGE_PARTS = ("image_url", "input_image", "image")
VIDEO_PARTS = ("video", "video_url", "input_video")


def image_sources(messages) -> list:
    """Each image part's source (a URL string, path, bytes or PIL image), in the order the prompt places them."""
    out = []
    for i, m in enumerate(messages if isinstance(messages, list) else []):
        content = m.get("content") if isinstance(m, dict) else None
        if not isinstance(content, list):
            continue
        for j, part in enumerate(content):
            kind = part.get("type") if isinstance(part, dict) else None
            where = f"messages[{i}].content[{j}]"
            if kind in VIDEO_PARTS:
                raise ChatFormatError(f"{where}: {kind} parts are not supported: K3's released processor takes images "
                                      "only (send frames as images)")
            if kind in IMAGE_PARTS:
                if m.get("role") != "user":
                    raise ChatFormatError(f"{where}: images go in user messages only (K3's processor takes them "
                                          f"from there), not in a {m.get('role')} message")
                out.append(_source(part, kind, where))
    return out


def _source(part: dict, kind: str, where: str):
    value = part.get("image") if kind == "image" else part.get("image_url")
    if isinstance(value, dict):
        value = value.get("url")
    if value is None or (isinstance(value, str) and not value):
        key = "image" if kind == "image" else "image_url.url"
        raise ChatFormatError(f"{where}: an {kind} part needs `{key}`")
    return value
