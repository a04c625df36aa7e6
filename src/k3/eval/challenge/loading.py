"""A challenge from its directory: challenge.json parsed (parse.py) and its frozen prompts checked (frozen.py).
Apart from spec.py, which holds what a challenge is and which both of those read."""

from __future__ import annotations

from pathlib import Path

from k3.eval.challenge import frozen, parse
from k3.eval.challenge.spec import Challenge


def load(directory: str | Path) -> Challenge:
    challenge = parse.challenge(Path(directory))
    frozen.verify_prompts(challenge)
    return challenge
