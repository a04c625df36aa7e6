"""Every `k3 ...` command in the shell blocks of the README and the docs parses with today's CLI, so
they cannot drift from it (tests/docs runs the commands of the pages it can). A full command must parse as written; a usage line (with `[...]`, `|` or `/`
alternatives) must name a real command and only flags that command has."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from k3.cli.main import build_parser

README = Path(__file__).resolve().parents[2] / "README.md"
PAGES = [README, *sorted((README.parent / "docs").rglob("*.md"))]


def readme_commands() -> list[str]:
    blocks = [b for page in PAGES for b in re.findall(r"```bash\n(.*?)```", page.read_text(), re.S)]
    lines = [line.strip() for b in blocks for line in b.replace("\\\n", " ").splitlines()]
    return [re.sub(r"\s+#.*$", "", line) for line in lines if line.startswith("k3 ")]


def _flags(subparser) -> set[str]:
    return {opt for action in subparser._actions for opt in action.option_strings}


def _subparsers(parser):
    action = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return action.choices


def test_the_readme_has_commands_to_check():
    assert len(readme_commands()) > 30


@pytest.mark.parametrize("line", readme_commands())
def test_each_readme_command_parses(line):
    parser = build_parser()
    words = shlex.split(line)[1:]
    usage = any(ch in line for ch in "[]|") or " / " in line
    if not usage:
        try:
            parser.parse_args(words)
        except SystemExit:
            pytest.fail(f"documented command does not parse: {line}")
        return
    commands = _subparsers(parser)
    assert words[0] in commands, f"unknown command in README: {line}"
    for name in words[1:]:
        if name in commands:        # `k3 download / verify / doctor / quantize`
            continue
        flag = name.strip("[]").split("=")[0]
        if flag.startswith("--"):
            assert flag in _flags(commands[words[0]]), f"{words[0]} has no {flag} (README: {line})"


def test_readme_points_only_inside_the_repository():
    """No "spec §" references to a document the repository does not hold, and every relative link resolves."""
    text = README.read_text()
    assert "§" not in text
    for target in re.findall(r"\]\(([^)#\s]+)\)", text):
        if not re.match(r"[a-z]+://", target):
            assert (README.parent / target).exists(), target
