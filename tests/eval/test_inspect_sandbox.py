"""k3's sandbox as Inspect AI's sandbox environment "k3" (issue 43, first step): Inspect's own CLI and its
eval() find it through the extension entry point, run a shell, the interpreter and pytest in it, and read
back what was left in the workspace."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sandbox_support import need_namespaces

TASK = Path(__file__).with_name("inspect_tasks") / "shell_task.py"
pytest.importorskip("inspect_ai", reason="Inspect AI comes with the [eval] extra")


def test_inspect_cli_runs_a_task_with_sandbox_k3(tmp_path):
    need_namespaces()
    inspect = Path(sys.executable).with_name("inspect")
    # In the caller's environment: its HOME holds k3's native-kernel cache (a fresh HOME rebuilds it).
    r = subprocess.run([str(inspect), "eval", TASK.name, "--model", "mockllm/model", "--sandbox", "k3",
                        "--log-dir", str(tmp_path), "--log-format", "json", "--display", "plain"],
                       capture_output=True, text=True, timeout=300, cwd=TASK.parent)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    logs = sorted(tmp_path.glob("*.json"))
    assert logs, r.stdout[-1000:]
    log = json.loads(logs[-1].read_text())
    assert log["status"] == "success", log.get("error")
    assert log["eval"]["sandbox"]["type"] == "k3"
    scores = log["results"]["scores"][0]["metrics"]["accuracy"]["value"]
    assert scores == 1.0, log["samples"][0]["scores"]


def test_eval_api_with_limits_and_a_config_it_does_not_know(tmp_path):
    need_namespaces()
    from inspect_ai import eval as inspect_eval

    sys.path.insert(0, str(TASK.parent))
    try:
        from shell_task import shell_task
    finally:
        sys.path.pop(0)
    [log] = inspect_eval(shell_task(), model="mockllm/model", sandbox=("k3", {"wall_s": 60, "processes": 48}),
                         log_dir=str(tmp_path), display="none")
    assert log.status == "success" and log.results.scores[0].metrics["accuracy"].value == 1.0
    with pytest.raises(Exception, match="wall_s|extra"):
        inspect_eval(shell_task(), model="mockllm/model", sandbox=("k3", {"wall": 60}), log_dir=str(tmp_path),
                     display="none")


def test_the_environment_refuses_other_users_and_reports_timeouts():
    need_namespaces()
    import asyncio

    from inspect_ai.util._sandbox.environment import SandboxUserUnsupportedError

    from k3.eval.inspect.sandbox_env import K3SandboxConfig, K3SandboxEnvironment

    async def run():
        envs = await K3SandboxEnvironment.sample_init("t", K3SandboxConfig(wall_s=5), {})
        box = envs["default"]
        try:
            with pytest.raises(SandboxUserUnsupportedError):
                await box.exec(["true"], user="root")
            with pytest.raises(TimeoutError):
                await box.exec(["sleep", "30"], timeout=1)
            await box.write_file("/workspace/bin.dat", b"\x00\xff")
            assert await box.read_file("bin.dat", text=False) == b"\x00\xff"
            r = await box.exec(["pwd"], cwd="/workspace")
            assert r.success and r.stdout.strip() == "/workspace"
        finally:
            await K3SandboxEnvironment.sample_cleanup("t", None, envs, False)

    asyncio.run(run())
