"""Validating a request's grammar where a crash of the grammar library cannot take the server down.

llguidance is native code: a constraint that overflows its stack kills the process it runs in. The
caps in engine/structured/bounds.py stop the shapes known to do that; anything they miss is caught
here, because the server validates each grammar in a child process first (`python -m
k3.serve.grammar_check`, one JSON line in, one out). A child that dies answers the request with a
400 naming the problem and is started anew for the next; one that takes too long is killed the same way.
The engine compiles the grammar in-process only after the child has accepted it."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import threading

TIMEOUT_S = 20.0


class GrammarChecker:
    """One child process, used by one request at a time (its lock), restarted after a crash or a timeout."""

    def __init__(self, timeout_s: float = TIMEOUT_S):
        self.timeout_s = timeout_s
        self._proc: subprocess.Popen | None = None
        self._lock = threading.Lock()

    def problem(self, grammar: str) -> str | None:
        """llguidance's complaint about a grammar (its JSON definition), or None when it is valid. ValueError when the check
        itself crashed or timed out (the grammar is refused either way)."""
        with self._lock:
            proc = self._child()
            try:
                proc.stdin.write((json.dumps({"grammar": grammar}) + "\n").encode())
                proc.stdin.flush()
                ready, _, _ = select.select([proc.stdout], [], [], self.timeout_s)
                line = proc.stdout.readline() if ready else None
            except (BrokenPipeError, OSError):
                line = b""
            if not line:
                self._stop()
                what = "took longer than %gs" % self.timeout_s if line is None else "crashed"
                raise ValueError(f"the grammar library {what} on this constraint; simplify it (fewer `$ref`s, rules "
                                 "or nesting)")
            return json.loads(line).get("problem")

    def close(self) -> None:
        with self._lock:
            self._stop()

    def _child(self) -> subprocess.Popen:
        if self._proc is None or self._proc.poll() is not None:
            self._proc = subprocess.Popen([sys.executable, "-m", "k3.serve.grammar_check"], stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        return self._proc

    def _stop(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            for stream in (self._proc.stdin, self._proc.stdout):
                stream.close()
            self._proc = None


_shared: list[GrammarChecker] = []


def shared() -> GrammarChecker:
    """The process's checker (created on first use)."""
    if not _shared:
        _shared.append(GrammarChecker())
    return _shared[0]


def _serve() -> None:
    import llguidance

    for line in sys.stdin:
        grammar = json.loads(line)["grammar"]
        try:
            problem = llguidance.LLMatcher.validate_grammar(grammar)
        except Exception as e:   # the library's Python-level errors are the grammar's problem too
            problem = f"{type(e).__name__}: {e}"
        sys.stdout.write(json.dumps({"problem": problem or None}) + "\n")
        sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    _serve()
