"""The docs: generated pages are fresh, the site builds strictly, the README stays short, and the commands
the pages show run (doc_runner.py), against stand-ins where a test cannot have the real thing."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from doc_runner import page
from k3.config.presets import tiny_chat, tiny_chat_vision
from k3.testing import make_checkpoint
from k3.engine import LLM
from k3.testing.http_mirror import Mirror
from k3.testing.serving import serving

ROOT = Path(__file__).resolve().parents[2]
RUN = ["README.md", "docs/getting-started.md", "docs/guide/models.md", "docs/guide/generating.md",
       "docs/guide/prefix-caching.md", "docs/design/k3-model.md", "docs/guide/chat-format.md",
       "docs/guide/serving.md", "docs/guide/speculative-decoding.md", "docs/guide/structured-outputs.md",
       "docs/guide/memory.md",
       "docs/guide/bench.md",
       "docs/guide/checkpoints.md", "docs/guide/train.md", "docs/benchmarks/methodology.md", "docs/guide/eval.md",
       "docs/guide/images.md", "docs/guide/check.md", "docs/troubleshooting.md"]
# Runs sized for a test: a handful of items and short answers where the page runs a set (the tiny model's
# answers are noise; the commands, their options and their reports are what is checked).
SMALL = {"--limit 40": "--limit 3 --max-tokens 16",
         "--epochs 3": "--epochs 2 --limit 2 --max-tokens 16 -T lengths=1024",
         "--judge-model other-model": "--judge-model other-model --limit 3 --max-tokens 16",
         "-T tasks=quat-half-angle": "-T tasks=quat-half-angle -T turns=2 --max-tokens 16",
         # the agent challenge: a sample or two, a turn or two a step
         "-T turns=80": "-T turns=1 --limit 1 --max-tokens 16", "-T turns=60": "-T turns=1 --max-tokens 16",
         "--log-dir runs/reference": "--log-dir runs/reference --limit 2", "-T path=inflection": "-T path=inflection --limit 1",
         "-T interactive=true": "-T turns=1"}


def test_generated_pages_are_up_to_date():
    run = subprocess.run([sys.executable, str(ROOT / "scripts/gen_docs.py"), "--check"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr


def test_the_site_builds_strictly(tmp_path):
    run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
                         cwd=ROOT, capture_output=True, text=True, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert run.returncode == 0, run.stderr[-3000:]
    assert (tmp_path / "site" / "guide" / "serving" / "index.html").is_file()


def test_the_readme_is_short_and_has_no_lab_notebook():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 220
    for narrative in ("this session", "Tried and dropped", "The next run", "On the AMD Zen", "measured here"):
        assert narrative not in text


def test_every_page_with_commands_is_run_or_says_why():
    pages = [str(p.relative_to(ROOT)) for p in [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]
             if "```bash" in p.read_text() or "```python" in p.read_text()]
    assert sorted(set(pages) - set(RUN)) == []


@pytest.fixture(scope="module")
def stand_ins(tmp_path_factory):
    """A tiny checkpoint with a tokenizer in K3's layout, served by a loopback mirror as the hub."""
    root = tmp_path_factory.mktemp("docs")
    ckpt = make_checkpoint(root / "tiny", tiny_chat_vision(), tokenizer=True)   # the release has a vision tower
    texts = [str(p) for p in sorted((ROOT / "docs").rglob("*.md"))[:12]]   # "your text": the docs' own
    dense = make_checkpoint(root / "dense", tiny_chat().replace(expert_format=None), tokenizer=True)
    remote = LLM(str(ckpt), cache_memory="64MiB", max_num_seqs=8)    # "a GPU box": a k3 server on loopback
    judge = LLM(str(dense), cache_memory="64MiB", max_num_seqs=8)    # a judge: other weights, another name
    policy = root / "policy.yaml"                                     # the eval page's own approval policy
    policy.write_text(_block(ROOT / "docs/guide/eval.md", "yaml"))
    steps = root / "steps.json"                                       # its step-interventions file
    steps.write_text(next(b for b in (ROOT / "docs/guide/eval.md").read_text().split("```json\n")[1:]
                          if '"kind": "hint"' in b).split("```", 1)[0])
    prices = root / "prices.json"
    prices.write_text('{"Kimi-K3": {"input": 0.6, "output": 2.5}}')
    with Mirror(ckpt) as mirror, serving(remote, "Kimi-K3") as url, serving(judge, "other-model") as judge_url:
        env = {**os.environ, "HF_ENDPOINT": mirror.url.split("/repo/")[0], "K3_MODELS_DIR": str(root / "models"),
               "HF_HOME": str(root / "hf"), "K3_CACHE_DIR": str(root / "cache"), "NO_COLOR": "1"}
        yield root, {"/models/Kimi-K3-draft": str(ckpt), "/models/Kimi-K3-int8": str(root / "int8"),
                     "/models/Kimi-K3": str(ckpt), "http://gpu-box:8000": url, "http://judge-box:8000": judge_url,
                     "https://huggingface.co/moonshotai/Kimi-K3/resolve/main/": mirror.url,
                     "https://mirror.example.org/Kimi-K3/": mirror.url, "--from URL": f"--from {mirror.url}",
                     "--dest DIR": f"--dest {root / 'download'}", "my-bf16-k3": str(dense),
                     "--text a.txt b.txt": f"--text {' '.join(texts)}", **SMALL, "--endpoint URL": f"--endpoint {url}",
                     "--approval human": f"--approval {policy} --limit 2 --max-tokens 16",
                     "--epochs 4 --prices prices.json": f"--epochs 2 --limit 1 -T turns=1 --max-tokens 16 --prices {prices}",
                     "--prices prices.json": f"--prices {prices}",
                     "--approval policy.yaml -T interventions=steps.json":
                         f"--approval {policy} -T interventions={steps} --limit 1 -T turns=1 --max-tokens 16"}, env


def _block(path: Path, lang: str) -> str:
    """The first ```LANG block of a page."""
    return path.read_text().split(f"```{lang}\n", 1)[1].split("```", 1)[0]


@pytest.mark.parametrize("name", RUN)
def test_the_commands_on_the_page_run(name, stand_ins, tmp_path, monkeypatch):
    root, subs, env = stand_ins
    for key in ("HF_ENDPOINT", "K3_MODELS_DIR", "HF_HOME", "K3_CACHE_DIR"):
        monkeypatch.setenv(key, env[key])
    runner = page(ROOT / name, tmp_path, subs, env)
    ran = runner.run()
    assert ran or runner.exempt, f"{name}: nothing ran"
