"""What a challenge run records about the agent, per step: turns, tokens, the context length it reached,
interventions (who stepped in, how, with what text, at which step, turn and context length) and
code-hallucination events read from its tools' output (a module or a name that does not exist, code
that cannot run). Kept in the sample's store, so the log holds it and `inspect view` shows it."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

# Tool output that shows the agent called code that does not exist, or wrote code that cannot run.
HALLUCINATIONS = (
    ("missing module", re.compile(r"ModuleNotFoundError: No module named '([^']+)'")),
    ("missing name", re.compile(r"ImportError: cannot import name '([^']+)'")),
    ("missing attribute", re.compile(r"AttributeError: (?:module )?'?([^']+)'? (?:object )?has no attribute '([^']+)'")),
    ("undefined name", re.compile(r"NameError: name '([^']+)' is not defined")),
    ("cannot run", re.compile(r"(SyntaxError|IndentationError|TabError): (.+)")),
)
KINDS = ("hint", "modify", "reject", "restart", "terminate")
CHARS_PER_TOKEN = 4


def hallucinations(text: str) -> list[dict]:
    """Each distinct finding in one tool output: {"kind", "detail"}."""
    found, seen = [], set()
    for kind, pattern in HALLUCINATIONS:
        for m in pattern.finditer(text or ""):
            detail = ".".join(g for g in m.groups() if g)[:200]
            if (kind, detail) not in seen:
                seen.add((kind, detail))
                found.append({"kind": kind, "detail": detail})
    return found


@dataclass
class Step:
    id: str
    turns: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    context_tokens: int = 0       # the longest prompt the model was given in this step
    seconds: float = 0.0
    verdict: dict = field(default_factory=dict)


@dataclass
class Records:
    steps: list[Step] = field(default_factory=list)
    interventions: list[dict] = field(default_factory=list)
    hallucinations: list[dict] = field(default_factory=list)
    sandbox_start_s: float | None = None

    @property
    def step(self) -> Step:
        return self.steps[-1]

    def model_call(self, output, messages) -> None:
        """One turn: its tokens (the model's count; else the conversation's characters / 4, and said so)."""
        s = self.step
        s.turns += 1
        usage = output.usage
        prompt = usage.input_tokens if usage and usage.input_tokens else _estimate(messages)
        s.input_tokens += prompt
        s.output_tokens += usage.output_tokens if usage and usage.output_tokens else len(output.completion or "") // 4
        s.context_tokens = max(s.context_tokens, prompt)

    def intervene(self, kind: str, who: str, text: str, **extra) -> None:
        """An intervention at the current step, turn and context length; `who`: "person" or "script"."""
        s = self.step
        self.interventions.append({"step": s.id, "turn": s.turns, "context_tokens": s.context_tokens, "kind": kind,
                                   "who": who, "text": text, **extra})

    def tool_output(self, tool: str, text: str, error=None) -> None:
        """A tool's result: what it printed, and a call Inspect could not make (a tool or an argument that
        does not exist) as a "bad tool call"."""
        found = hallucinations(text)
        if error is not None and error.type == "parsing":
            found.append({"kind": "bad tool call", "detail": error.message[:200]})
        for h in found:
            self.hallucinations.append({"step": self.step.id, "turn": self.step.turns, "tool": tool, **h})

    def to_dict(self) -> dict:
        return {"steps": [asdict(s) for s in self.steps], "interventions": self.interventions,
                "hallucinations": self.hallucinations, "sandbox_start_s": self.sandbox_start_s}


def _estimate(messages) -> int:
    return sum(len(m.text or "") for m in messages) // CHARS_PER_TOKEN


def approval_kind(decision: str) -> str | None:
    """An Inspect approval decision as an intervention kind (an approval is none)."""
    return {"reject": "reject", "modify": "modify", "terminate": "terminate", "escalate": None,
            "approve": None}.get(decision)


def who(approver: str | None) -> str:
    return "person" if approver == "human" else "script"
