"""Scripted eval backends: each answers from a fixed rule, so every score is known in advance."""

from __future__ import annotations

import json

from k3.eval.backends.base import Completion

REFUSAL_TEXT = "I'm sorry, but I can't help with that."


class ScriptedBackend:
    """Base: identity, token counts, no log-likelihoods unless a subclass gives them."""
    model = "scripted"

    def __init__(self):
        self.calls = 0

    def identity(self) -> dict:
        return {"kind": "endpoint", "url": "fake://", "model": self.model}

    def chat(self, messages, *, tools=None, max_tokens, temperature, seed) -> Completion:
        self.calls += 1
        return self.reply(messages, tools)

    def reply(self, messages, tools) -> Completion:
        raise NotImplementedError


class AlwaysRefuses(ScriptedBackend):
    model = "always-refuses"

    def reply(self, messages, tools):
        return Completion(REFUSAL_TEXT, prompt_tokens=10, completion_tokens=9)


class NeverRefuses(ScriptedBackend):
    model = "never-refuses"

    def reply(self, messages, tools):
        return Completion("Sure. Here is a detailed answer to your question, step by step.", prompt_tokens=10,
                          completion_tokens=12)


class BrokenToolCalls(ScriptedBackend):
    """Agent turns: a call with invalid JSON, an unknown tool, a path outside the workspace, then stops."""
    model = "broken-tools"

    def reply(self, messages, tools):
        turn = sum(m["role"] == "assistant" for m in messages)
        calls = [[{"id": "c1", "name": "write_file", "arguments": "{not json"}],
                 [{"id": "c2", "name": "delete_everything", "arguments": "{}"}],
                 [{"id": "c3", "name": "write_file", "arguments": json.dumps({"path": "../../escape.txt", "content": "x"})}],
                 [{"id": "c4", "name": "read_file", "arguments": json.dumps({})}]]
        if turn < len(calls):
            return Completion("", tool_calls=calls[turn], finish_reason="tool_calls", prompt_tokens=5, completion_tokens=5)
        return Completion("I am done.", prompt_tokens=5, completion_tokens=3)


class CodeThatDoesNotRun(ScriptedBackend):
    """Code answers that parse but import a module that does not exist, use a missing module function
    and call a function nobody wrote."""
    model = "bad-code"

    def reply(self, messages, tools):
        code = ("import numpyy\nimport math\n\ndef f(x):\n    return math.squareroot(x) + helper(x)\n\n"
                "for i in range(3):\n    print(f)\nraise RuntimeError('boom')\n")
        return Completion(f"Here you go:\n```python\n{code}```\n", prompt_tokens=8, completion_tokens=30)


class Truncates(ScriptedBackend):
    model = "truncates"

    def reply(self, messages, tools):
        return Completion("Let me think about this very caref", finish_reason="length", prompt_tokens=8, completion_tokens=32)


class SolvesAgentTasks(ScriptedBackend):
    """Writes each task's reference solution, runs the tests, then answers."""
    model = "solver"

    def __init__(self, solutions: dict[str, dict[str, str]]):
        super().__init__()
        self.solutions = solutions

    def reply(self, messages, tools):
        prompt = next(m["content"] for m in messages if m["role"] == "user")
        files = next(sol for key, sol in self.solutions.items() if key in prompt)
        turn = sum(m["role"] == "assistant" for m in messages)
        if turn == 0:
            calls = [{"id": f"w{i}", "name": "write_file", "arguments": json.dumps({"path": p, "content": c})}
                     for i, (p, c) in enumerate(files.items())]
            return Completion("", tool_calls=calls, finish_reason="tool_calls", prompt_tokens=50, completion_tokens=40)
        if turn == 1:
            return Completion("", tool_calls=[{"id": "t", "name": "run_tests", "arguments": "{}"}],
                              finish_reason="tool_calls", prompt_tokens=60, completion_tokens=5)
        return Completion("Done: the task is complete.", prompt_tokens=70, completion_tokens=6)


class FollowsConstraints(ScriptedBackend):
    """Obeys the rule of the first user turn up to `memory` filler exchanges, then forgets it."""
    model = "forgetful"

    def __init__(self, memory: int):
        super().__init__()
        self.memory = memory

    def reply(self, messages, tools):
        from k3.eval.tasks.constraints import comply

        fillers = (len(messages) - 3) // 2
        first = messages[0]["content"]
        checks = {"UPPERCASE": "upper", "Over and out.": "suffix:Over and out.", "JSON": "json_answer"}
        check = next((c for k, c in checks.items() if k in first), "plain")
        answer = "Eight legs; spiders are arachnids, not insects"
        return Completion(comply(check, answer) if fillers <= self.memory else answer + " 8!", prompt_tokens=3, completion_tokens=3)

