"""`k3 check` as the check guide shows it, end to end against `k3 serve` (issue 65): every `k3 check` command in
docs/guide/check.md runs, with the docs' own thresholds, against the bundled model served over loopback
(gpu-box and judge-box stand for it), and reaches a verdict: PASS, FAIL or INCONCLUSIVE honestly (the
bundled model is too small to pass them), never an error. Items and tokens are cut down to fit the test."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

pytest.importorskip("inspect_ai", reason="Inspect AI comes with the [eval] extra")

from k3 import LLM  # noqa: E402
from k3.cli.main import main  # noqa: E402
from k3.defaults import default_model  # noqa: E402
from k3.testing.serving import serving  # noqa: E402
from sandbox_support import need_namespaces  # noqa: E402

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guide" / "check.md"
SMALL = {"--limit": "3", "--max-tokens": "8"}


def commands() -> list[list[str]]:
    """The `k3 check` command lines of the guide's code blocks, continuation lines joined."""
    text = GUIDE.read_text().replace("\\\n", " ")
    return [shlex.split(line)[1:] for block in re.findall(r"```bash\n(.*?)```", text, re.DOTALL)
            for line in block.splitlines() if line.startswith("k3 check ")]


def _fitted(argv: list[str], url: str, log_dir: Path) -> list[str]:
    out, it = [], iter(argv)
    for arg in it:
        if arg in SMALL or arg == "--plot":
            next(it)
            continue
        out.append(url if arg.startswith("http://") else arg)
    if "--sweep" in out:
        out[out.index("--sweep") + 1] = "auto=1"
    return out + [k for pair in SMALL.items() for k in pair] + ["--log-dir", str(log_dir), "--json"]


@pytest.fixture(scope="module")
def server_url():
    llm = LLM(str(default_model()), max_num_seqs=4, cache_memory="64MiB")
    with serving(llm) as url:
        yield url


def test_the_guide_shows_its_commands():
    shown = commands()
    assert len(shown) >= 4 and all(argv[0] == "check" for argv in shown), shown


@pytest.mark.parametrize("index", range(4))
def test_each_command_of_the_guide_reaches_a_verdict(server_url, tmp_path, capsys, index):
    need_namespaces()                               # humaneval runs answers in the sandbox
    argv = _fitted(commands()[index], server_url, tmp_path)
    code = main(argv)
    out = capsys.readouterr().out
    result = json.loads(out.strip().splitlines()[-1])
    assert result["verdict"] in ("PASS", "FAIL", "INCONCLUSIVE"), (argv, result.get("errors"))
    assert code == {"PASS": 0, "FAIL": 1, "INCONCLUSIVE": 3}[result["verdict"]]
    assert bool(result["requirements"]) == ("--require" in argv)
    assert all(r["status"] in ("PASS", "FAIL", "INCONCLUSIVE") for r in result["requirements"])
    assert all(r["n"] > 0 or r["status"] == "INCONCLUSIVE" for r in result["requirements"])
