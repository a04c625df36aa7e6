"""`--sandbox k3`: each sample gets a fresh k3 Sandbox (bubblewrap namespaces, a size-capped tmpfs workspace,
rlimits, Landlock, seccomp) instead of a Docker container; neither Docker nor root is needed.

Commands run through `Sandbox.exec`: a shell, the interpreter, pytest, each in its own PID namespace
where it may start processes of its own. The workspace is the working directory (`/workspace`); files
outside it are not reachable. Configuration: `sandbox=("k3", {"wall_s": 60, "memory_bytes": ...})` takes
`Limits` fields; commands run as the sandbox's one user (a `user=` other than that is refused, as
Inspect asks)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import fields, replace
from typing import Any

from inspect_ai.util import ExecResult, SandboxEnvironment, SandboxEnvironmentConfigType, sandboxenv
from inspect_ai.util._sandbox.environment import SandboxUserUnsupportedError
from inspect_ai.util._sandbox.limits import OutputLimitExceededError
from pydantic import BaseModel, ConfigDict

from k3.eval.sandbox import Limits, Sandbox

USERS = (None, "k3", "1000")
READ_LIMIT = 100 << 20   # Inspect's default for read_file


class K3SandboxConfig(BaseModel):
    """`Limits` fields for every sample's sandbox (the rest keep k3's defaults)."""

    model_config = ConfigDict(extra="forbid", frozen=True)   # hashable, as Inspect keys sandboxes by their spec
    wall_s: float | None = None
    cpu_s: int | None = None
    memory_bytes: int | None = None
    output_bytes: int | None = None
    file_bytes: int | None = None
    processes: int | None = None
    open_files: int | None = None
    workspace_bytes: int | None = None

    def limits(self) -> Limits:
        given = {f.name: getattr(self, f.name) for f in fields(Limits) if getattr(self, f.name, None) is not None}
        return replace(Limits(wall_s=120.0, cpu_s=120, processes=64, output_bytes=1 << 20), **given)


@sandboxenv(name="k3")
class K3SandboxEnvironment(SandboxEnvironment):
    def __init__(self, sandbox: Sandbox, start_s: float | None = None):
        super().__init__()
        self.sandbox = sandbox
        self.start_s = start_s       # seconds the sandbox took to start (reported with the challenge's records)

    @classmethod
    def config_deserialize(cls, config: dict[str, Any]) -> BaseModel:
        return K3SandboxConfig(**config)

    @classmethod
    async def sample_init(cls, task_name: str, config: SandboxEnvironmentConfigType | None,
                          metadata: dict[str, str]) -> dict[str, SandboxEnvironment]:
        limits = (config if isinstance(config, K3SandboxConfig) else K3SandboxConfig()).limits()
        t0 = time.perf_counter()
        box = await asyncio.to_thread(Sandbox, limits)
        return {"default": cls(box, round(time.perf_counter() - t0, 3))}

    @classmethod
    async def sample_cleanup(cls, task_name: str, config: SandboxEnvironmentConfigType | None,
                             environments: dict[str, SandboxEnvironment], interrupted: bool) -> None:
        for env in environments.values():
            await asyncio.to_thread(env.as_type(K3SandboxEnvironment).sandbox.close)

    async def exec(self, cmd: list[str], input: str | bytes | None = None, cwd: str | None = None,
                   env: dict[str, str] | None = None, user: str | None = None, timeout: int | None = None,
                   timeout_retry: bool = True, concurrency: bool = True) -> ExecResult[str]:
        if user not in USERS:
            raise SandboxUserUnsupportedError(f"the k3 sandbox runs commands as its one user, not {user!r}")
        stdin = input.encode() if isinstance(input, str) else (input or b"")
        r = await asyncio.to_thread(self.sandbox.exec, cmd, stdin, _inside(cwd), env, timeout)
        if r.timed_out:
            raise TimeoutError(f"{cmd[0]} ran past {timeout or self.sandbox.limits.wall_s:g} s")
        if r.output_exceeded:
            raise OutputLimitExceededError(f"{self.sandbox.limits.output_bytes} bytes", r.stdout)
        return ExecResult(success=r.exit_code == 0, returncode=r.exit_code if r.exit_code is not None else -1,
                          stdout=r.stdout, stderr=r.stderr)

    async def write_file(self, file: str, contents: str | bytes) -> None:
        await asyncio.to_thread(self.sandbox.write_file, file, contents)

    async def read_file(self, file: str, text: bool = True):
        data = await asyncio.to_thread(self.sandbox.read_bytes, file, READ_LIMIT + 1)
        if len(data) > READ_LIMIT:
            raise OutputLimitExceededError(f"{READ_LIMIT} bytes", None)
        return data.decode("utf-8") if text else data


def _inside(cwd: str | None) -> str | None:
    """A working directory relative to the workspace (Inspect may give /workspace/...)."""
    if cwd is None:
        return None
    return cwd.removeprefix("/workspace").lstrip("/") or None
