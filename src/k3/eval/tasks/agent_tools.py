"""The tools an agent gets, their OpenAI schemas, and how the harness runs a call in the sandbox.

Every time the harness has to step in, it records an intervention: a malformed call (unknown tool,
arguments that are not a JSON object, missing or wrong-typed arguments), a sandbox violation (a path
outside the workspace, a blocked operation in run code), a limit (time, output) or a tool that failed
on what the workspace holds (every failure of a tool call is the model's, reported to it and recorded,
and never stops the run; every text returned encodes as UTF-8, whatever names the workspace holds)."""

from __future__ import annotations

import json

from k3.eval.sandbox import RunResult, Sandbox, SandboxViolation
from k3.eval.sandbox.paths import MAX_LISTED, printable


def _tool(name: str, description: str, **params: str) -> dict:
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": {p: {"type": "string", "description": d} for p, d in params.items()},
        "required": list(params)}}}


TOOLS = [
    _tool("run_python", "Run Python code in the workspace; returns exit code, stdout and stderr.", code="Python source"),
    _tool("read_file", "Read a text file from the workspace.", path="path relative to the workspace"),
    _tool("write_file", "Create or overwrite a text file in the workspace.", path="path relative to the workspace",
          content="the whole new file content"),
    _tool("list_files", "List the files in the workspace."),
    _tool("run_tests", "Run the unittest tests (test_*.py) in the workspace."),
]
REQUIRED = {t["function"]["name"]: t["function"]["parameters"]["required"] for t in TOOLS}
RUN_TESTS = "import sys, unittest\nsys.argv = ['unittest', 'discover', '-s', '.', '-p', 'test_*.py', '-v']\nunittest.main(module=None)\n"


def execute(sb: Sandbox, call: dict, log: list[dict], step: int) -> str:
    """Run one tool call; returns the text the model sees. Appends interventions to `log`."""
    name = call.get("name")
    if name not in REQUIRED:
        return _intervene(log, step, "malformed_tool_call", f"unknown tool {name!r}; tools: {', '.join(REQUIRED)}")
    try:
        args = json.loads(call.get("arguments") or "{}")
    except json.JSONDecodeError as e:
        return _intervene(log, step, "malformed_tool_call", f"{name}: arguments are not valid JSON ({e.msg})")
    if not isinstance(args, dict):
        return _intervene(log, step, "malformed_tool_call", f"{name}: arguments must be a JSON object")
    bad = [p for p in REQUIRED[name] if not isinstance(args.get(p), str)]
    if bad:
        return _intervene(log, step, "malformed_tool_call", f"{name}: missing or non-string argument(s) {', '.join(bad)}")
    try:
        return printable(_dispatch(sb, name, args, log, step))
    except SandboxViolation as e:
        return _intervene(log, step, "sandbox_violation", printable(str(e)))
    except (OSError, UnicodeError) as e:  # a missing file, a directory, a FIFO, the workspace full
        return printable(f"error: {e}")
    except Exception as e:   # whatever the workspace holds, a tool's failure is the model's problem, never the harness's
        return _intervene(log, step, "tool_error", printable(f"{name} failed: {type(e).__name__}: {e}")[:1000])


def _dispatch(sb: Sandbox, name: str, args: dict, log: list[dict], step: int) -> str:
    if name == "read_file":
        return sb.read_file(args["path"])
    if name == "write_file":
        sb.write_file(args["path"], args["content"])
        return f"wrote {len(args['content'].encode())} bytes to {args['path']}"
    if name == "list_files":
        names = sb.list_files()
        cut = f"\n(listing cut at {len(names)} files)" if len(names) >= MAX_LISTED else ""
        return ("\n".join(names) or "(empty)") + cut
    result = sb.run_python(args["code"] if name == "run_python" else RUN_TESTS)
    _note_run(result, log, step)
    return result.summary()


def _note_run(r: RunResult, log: list[dict], step: int) -> None:
    if r.timed_out:
        _intervene(log, step, "limit", "killed at the wall-clock limit")
    elif r.output_exceeded:
        _intervene(log, step, "limit", "killed at the output limit")
    if "sandbox:" in r.stderr and "not allowed" in r.stderr:
        _intervene(log, step, "sandbox_violation", r.stderr.strip().splitlines()[-1][:300])


def _intervene(log: list[dict], step: int, kind: str, detail: str) -> str:
    log.append({"step": step, "kind": kind, "detail": detail})
    return f"error: {detail}"
