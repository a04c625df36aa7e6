"""Runs the commands of a Markdown page as a reader would, against stand-ins for what a test cannot have:
a 1.56 TB checkpoint becomes a tiny one in the same layout, a remote server a `k3 serve` on loopback, the
Hugging Face hub a loopback mirror (HF_ENDPOINT). ```python blocks run in one namespace per page; ```bash
lines run one by one (`k3 ...` as `python -m k3.cli.main ...`; `k3 serve` in the background, on a free
port that replaces the page's 8000, until the page ends)."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from k3.testing.serving import free_port

FENCE = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)
# Commands a test does not run, and why (each is run elsewhere, or is set-up the test itself stands on).
NOT_RUN = {
    "make ": "the set-up commands: CI runs make test; tests/cli/test_demo.py runs the demo",
    "python3 -m venv": "installing k3: the environment this test runs in",
    "source .venv/bin/activate": "activating the environment this test runs in; tests/cli/test_readme_as_written.py "
                                 "runs the README's set-up and quickstarts verbatim in a fresh clone and shell",
    ".venv/bin/pip": "installing k3: the environment this test runs in",
    "mkdocs": "tests/docs/test_docs.py builds the site",
    "inspect view": "a log viewer (a GUI)",
    ".venv/bin/python benchmarks/": "benchmarks run for minutes; benchmarks/record.py keeps their results",
    ".venv/bin/python scripts/gen_docs.py": "it rewrites the repository's pages; tests/docs checks them with --check",
    "k3 synth slice/ --preset k3": "writes 13 GB at K3's dimensions; tests/cli/test_cli.py writes a slice",
    "k3 train --config prose": "the bundled model's recipe, an hour on 2 cores (make model); the tiny run beside it runs",
    "HF_DATASETS_OFFLINE=1 lm_eval": "my_tasks/ is the reader's own; tests/eval/test_lm_eval_client.py runs lm_eval "
                                     "this way against k3 serve with two tasks of its own",
    "torchrun": "two training processes; tests/train/test_training.py runs data-parallel training",
}


# Blocks and lines already run with the same stand-ins in this session (the README's quickstarts are the
# getting-started page's): each runs once.
DONE: set[str] = set()


@dataclass
class Page:
    path: Path
    workdir: Path
    env: dict
    subs: dict[str, str]
    servers: list = field(default_factory=list)
    ran: list[str] = field(default_factory=list)
    exempt: list[str] = field(default_factory=list)     # lines NOT_RUN names, with its reason

    def blocks(self) -> list[tuple[str, str]]:
        return [(lang, body) for lang, body in FENCE.findall(self.path.read_text()) if lang in ("bash", "python")]

    def sub(self, text: str) -> str:
        for old, new in self.subs.items():
            text = text.replace(old, new)
        return text

    def run(self) -> list[str]:
        namespace: dict = {}
        try:
            for lang, body in self.blocks():
                if lang == "python":
                    if body not in DONE:
                        self._python(self.sub(body), namespace)
                    else:
                        self.ran.append(body.splitlines()[0] + "  (ran on an earlier page)")
                    DONE.add(body)
                    continue
                for line in _lines(body):
                    if line not in DONE:
                        self._command(line)
                    else:
                        self.ran.append(line + "  (ran on an earlier page)")
                    DONE.add(line)
        finally:
            for proc in self.servers:
                _stop(proc)
        return self.ran

    def _python(self, source: str, namespace: dict) -> None:
        cwd = os.getcwd()
        os.chdir(self.workdir)
        try:
            exec(compile(source, str(self.path), "exec"), namespace)   # noqa: S102 - the docs' own examples
        finally:
            os.chdir(cwd)
        self.ran.append(source.splitlines()[0])

    def _command(self, line: str) -> None:
        reason = next((why for prefix, why in NOT_RUN.items() if line.startswith(prefix)), None)
        if reason is not None:
            self.exempt.append(f"{line}: {reason}")
            return
        argv = shlex.split(self.sub(line), comments=True)
        stdin = None
        if "|" in argv:                                   # `echo TEXT | k3 ...`
            cut = argv.index("|")
            assert argv[0] == "echo", line
            stdin, argv = " ".join(argv[1:cut]) + "\n", argv[cut + 1:]
        assert argv[0] in ("k3", "inspect"), f"{self.path}: a command the docs runner does not know: {line}"
        if argv[0] == "inspect":                          # Inspect's console script, beside this interpreter
            argv = [str(Path(sys.executable).parent / "inspect"), *argv[1:]]
        else:
            argv = [sys.executable, "-m", "k3.cli.main", *argv[1:]]
        if argv[1:4] == ["-m", "k3.cli.main", "serve"]:
            return self._serve(argv, line)
        run = subprocess.run(argv, cwd=self.workdir, env=self.env, input=stdin, capture_output=True, text=True,
                             timeout=600)
        # `k3 check` exits with its verdict: PASS 0, FAIL 1, INCONCLUSIVE 3 all mean it ran to a verdict (the tiny
        # stand-in model cannot be held to a page's thresholds); a usage error (2) or a run that broke (4) fails
        # `k3 doctor` exits 1 when the machine cannot give the page's --memory-budget (a 1.56 TB model's 200 GB on a
        # test machine): a report with a problem is a run to its answer too.
        verdicts = (0, 1, 3) if argv[3:4] == ["check"] else (0, 1) if argv[3:4] == ["doctor"] else (0,)
        assert run.returncode in verdicts, f"{self.path}: `{line}` exited {run.returncode}:\n{run.stderr[-3000:]}"
        self.ran.append(line)

    def _serve(self, argv: list[str], line: str) -> None:
        port = self.subs["8000"]
        proc = subprocess.Popen(argv + (["--port", port] if "--port" not in argv else []), cwd=self.workdir,
                                env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                preexec_fn=_ctrl_c_as_in_a_terminal)
        self.servers.append(proc)
        url = f"http://127.0.0.1:{port}"
        end = time.monotonic() + 180
        while time.monotonic() < end:
            assert proc.poll() is None, f"{self.path}: `{line}` exited: {proc.stderr.read()[-3000:]}"
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    self.ran.append(line)
                    return
            except httpx.HTTPError:
                time.sleep(0.3)
        raise AssertionError(f"{self.path}: `{line}` did not come up")


def _ctrl_c_as_in_a_terminal() -> None:
    """A pytest-xdist worker ignores SIGINT and a child inherits that: restore it, as a terminal has it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _stop(proc) -> None:
    """Ctrl-C, as a reader would; a second one if the first has not ended it (it forces the shut-down)."""
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)
        proc.wait(30)


def _lines(body: str):
    """Logical command lines: continuations joined, comments and blanks dropped."""
    for line in body.replace("\\\n", " ").splitlines():
        line = re.sub(r"\s+#.*$", "", line.strip())
        if line and not line.startswith("#"):
            yield line


def page(path: Path, workdir: Path, subs: dict[str, str], env: dict) -> Page:
    return Page(path, workdir, env, {**subs, "8000": str(free_port())})
