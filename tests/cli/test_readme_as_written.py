"""The README's set-up and quickstarts, verbatim, in a fresh clone and a fresh shell (issue 69: after `make demo`,
`k3` was "command not found" in a new shell, and `k3 serve` named a package that is not on the index).

The shell is bash with no profile, the environment of the test's process less its virtualenv (no VIRTUAL_ENV,
no venv on PATH) and less the test's own cache folder, as a new terminal has it. The lines run are the README's
own, read from it: `make demo` and the activation line, the Python quickstart, the command-line quickstart,
the server and its client (on a free port instead of 8000, which another process may hold). Only `make test`
is left out: it is what runs this test."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from k3.testing.serving import free_port

ROOT = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)


def _section(text: str, heading: str) -> list[tuple[str, str]]:
    """The fenced blocks (language, body) under `## heading`, up to the next `## `."""
    body = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    return FENCE.findall(body)


def _fresh_env() -> dict:
    venv = str(Path(sys.executable).parent)
    env = {k: v for k, v in os.environ.items()
           if k not in ("VIRTUAL_ENV", "PYTHONPATH", "K3_CACHE_DIR") and not k.startswith(("PYTEST", "COV_"))}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p and p != venv)
    return env


def _script(readme: str, port: int) -> str:
    [(_, setup)] = [b for b in _section(readme, "Install") if "make demo" in b[1]]
    lines = [line for line in setup.splitlines() if not line.startswith("make test")]
    assert any(line.startswith("source ") for line in lines), "the README never activates the environment"
    [(_, python_quick)] = _section(readme, "Quickstart: Python")
    [(_, commands)] = _section(readme, "Quickstart: command line")
    [(_, serve), (_, client)] = _section(readme, "Quickstart: server")
    serve = serve.replace("8000", str(port)).split("#")[0].strip()     # its comment would swallow the `&`
    client = client.replace("8000", str(port))
    wait = (f"python -c \"import time, urllib.request\nfor _ in range(600):\n    try:\n"
            f"        urllib.request.urlopen('http://127.0.0.1:{port}/health'); break\n    except OSError:\n"
            f"        time.sleep(0.2)\"")
    return "\n".join(["set -euo pipefail", *lines, "command -v k3", f"python - <<'PY'\n{python_quick}PY",
                      commands, f"{serve} > serve.log 2>&1 &", wait, f"python - <<'PY'\n{client}PY",
                      "kill %1", "wait %1 || true", ""])


@pytest.mark.skipif(not (ROOT / ".git").exists(), reason="needs the repository (a clone of it is what is tested)")
def test_the_readme_runs_as_written_in_a_fresh_clone_and_shell(tmp_path):
    clone = tmp_path / "k3"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True, timeout=300)
    script = _script((clone / "README.md").read_text(), free_port())
    run = subprocess.run(["bash", "--noprofile", "--norc", "-c", script], cwd=clone, env=_fresh_env(),
                         capture_output=True, text=True, timeout=1500)
    log = (clone / "serve.log").read_text() if (clone / "serve.log").exists() else ""
    assert run.returncode == 0, f"{run.stdout[-4000:]}\n{run.stderr[-4000:]}\nserver:\n{log[-2000:]}"
    assert f"{clone}/.venv/bin/k3" in run.stdout          # the README's own activation put k3 on PATH
