"""Resumed and concurrent runs, log-likelihood and generation tasks from files, task-name errors."""

from __future__ import annotations

import json
import math
import threading
import time

import pytest

from fake_models import NeverRefuses, ScriptedBackend
from k3.eval.backends.base import BackendError
from k3.eval.registry import make_tasks
from k3.eval.runner import run_eval
from k3.eval.tasks.base import Settings

SETTINGS = Settings(constraint_lengths=(0, 2))
SPEC = "refusal,constraints,code"


class CrashesAfter(NeverRefuses):
    """The same model as NeverRefuses, on a connection that drops after `n` answers."""

    def __init__(self, n: int):
        super().__init__()
        self.n = n

    def reply(self, messages, tools):
        if self.calls > self.n:
            raise BackendError("connection reset by peer")
        return super().reply(messages, tools)


def test_resumed_run_gives_the_same_report_as_an_uninterrupted_one(tmp_path):
    whole = run_eval(NeverRefuses(), make_tasks(SPEC, SETTINGS), SETTINGS, tmp_path / "whole", limit=6, progress=False)
    with pytest.raises(BackendError):
        run_eval(CrashesAfter(9), make_tasks(SPEC, SETTINGS), SETTINGS, tmp_path / "cut", limit=6, progress=False)
    with open(tmp_path / "cut" / "answers.jsonl", "a") as f:
        f.write('{"key": "half a line')  # a crash in the middle of a write
    again = NeverRefuses()
    resumed = run_eval(again, make_tasks(SPEC, SETTINGS), SETTINGS, tmp_path / "cut", limit=6, progress=False)
    assert again.calls == 6 + 6 + 6 - 9  # only what the first run did not finish
    assert resumed == whole
    assert (tmp_path / "cut" / "report.json").read_text() == (tmp_path / "whole" / "report.json").read_text()


def test_changed_settings_do_not_reuse_answers(tmp_path):
    run_eval(NeverRefuses(), make_tasks("refusal", SETTINGS), SETTINGS, tmp_path, limit=3, progress=False)
    other = NeverRefuses()
    run_eval(other, make_tasks("refusal", SETTINGS), Settings(temperature=0.7), tmp_path, limit=3, progress=False)
    assert other.calls == 3


class ScoresShortest(ScriptedBackend):
    """log p(continuation) = -len(continuation): the shortest choice always wins."""

    def loglikelihood(self, context, continuation):
        return -float(len(continuation)), len(continuation)

    def loglikelihood_rolling(self, text):
        return -float(len(text)), len(text)


def test_multiple_choice_generation_and_perplexity_files(tmp_path):
    mc = tmp_path / "mc.jsonl"
    mc.write_text('{"question": "2+2=", "choices": ["4", "four"], "answer": 0}\n'
                  '{"question": "Sky?", "choices": ["blue", "a"], "answer": 0}\n')
    text = tmp_path / "t.txt"
    text.write_text("abcd\n\nefgh ij\n")
    tasks = run_eval(ScoresShortest(), make_tasks(f"mc:{mc},perplexity:{text}", SETTINGS), SETTINGS, tmp_path / "r",
                     progress=False)["tasks"]
    assert tasks["mc:mc.jsonl"]["scores"]["acc"]["mean"] == 0.5
    ppl = tasks["perplexity:t.txt"]["scores"]
    assert ppl["tokens"] == 11 and ppl["bytes"] == 11 and ppl["perplexity"] == pytest.approx(math.e)
    assert ppl["bits_per_byte"] == pytest.approx(1 / math.log(2))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "x", "choices": ["a"], "answer": 0}\n')
    with pytest.raises(ValueError, match="row 1 needs"):
        make_tasks(f"mc:{bad}", SETTINGS)
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"prompt": "x", "answer": "y"}\n{oops\n')
    with pytest.raises(ValueError, match="broken.jsonl:2: not valid JSON"):
        make_tasks(f"gen:{broken}", SETTINGS)


class Echoes(ScriptedBackend):
    def reply(self, messages, tools):
        from k3.eval.backends.base import Completion

        return Completion(f"The answer is {messages[-1]['content'].split()[-1]}.")


def test_generation_exact_match_with_extraction(tmp_path):
    gen = tmp_path / "g.jsonl"
    gen.write_text('{"prompt": "say 42", "answer": "42", "extract": "answer is (\\\\d+)"}\n'
                   '{"prompt": "say 7", "answer": ["8", "9"], "extract": "answer is (\\\\d+)"}\n'
                   '{"prompt": "say Paris", "answer": "paris", "match": "contains"}\n')
    s = run_eval(Echoes(), make_tasks(f"gen:{gen}", SETTINGS), SETTINGS, tmp_path / "r", progress=False)["tasks"]["gen:g.jsonl"]
    assert [r["correct"] for r in s["records"]] == [True, False, True]
    assert s["scores"]["exact_match"]["k"] == 2


class Continues(Echoes):
    """Raw completions: the prompt's last word twice, then ", and more"; records the stops it was sent."""
    def complete(self, prompt, *, max_tokens, temperature, seed, stop):
        from k3.eval.backends.base import Completion

        self.sent = getattr(self, "sent", []) + [(max_tokens, stop)]
        word = prompt.split()[-1]
        text = f" {word} {word}, and more"
        ends = [i for i in (text.find(x) for x in stop) if i >= 0]
        return Completion(text[:min(ends)] if ends else text)


def test_generation_in_completion_mode_and_stop_strings(tmp_path):
    gen = tmp_path / "g.jsonl"
    rows = [{"prompt": "say echo", "answer": "echo echo", "mode": "completion", "stop": [","], "max_tokens": 9},
            {"prompt": "say 42", "answer": "The answer is", "stop": " 42"},      # chat mode: the reply is cut
            {"prompt": "say x", "answer": "x x, and more", "mode": "completion"}]
    gen.write_text("".join(json.dumps(r) + "\n" for r in rows))
    backend = Continues()
    s = run_eval(backend, make_tasks(f"gen:{gen}", SETTINGS), SETTINGS, tmp_path / "r", progress=False)["tasks"]["gen:g.jsonl"]
    assert [r["correct"] for r in s["records"]] == [True, True, True]
    assert backend.sent == [(9, [","]), (SETTINGS.max_tokens, [])] and backend.calls == 1
    for bad, message in [({"mode": "raw"}, "mode"), ({"mode": "completion", "prompt": None, "messages": []}, "prompt"),
                         ({"stop": ""}, "stop"), ({"stop": [1]}, "stop"), ({"max_tokens": 5}, "max_tokens"),
                         ({"mode": "completion", "max_tokens": 0}, "max_tokens")]:
        gen.write_text(json.dumps({"prompt": "p", "answer": "a"} | bad) + "\n")
        with pytest.raises(ValueError, match=f"row 1: .*{message}"):
            make_tasks(f"gen:{gen}", SETTINGS)


def test_unknown_task_names_the_choices():
    with pytest.raises(ValueError, match="built-in tasks are refusal, agent, code, constraints"):
        make_tasks("refusal,mmlu", SETTINGS)


class SlowEndpoint(NeverRefuses):
    """Takes 20 ms per answer and records how many answers were in flight at once."""

    def __init__(self):
        super().__init__()
        self.lock, self.now, self.most = threading.Lock(), 0, 0

    def reply(self, messages, tools):
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
        time.sleep(0.02)
        with self.lock:
            self.now -= 1
        return super().reply(messages, tools)


def test_concurrent_items_give_the_same_report(tmp_path):
    one = run_eval(NeverRefuses(), make_tasks("refusal,agent", SETTINGS), SETTINGS, tmp_path / "a", limit=8, progress=False)
    slow = SlowEndpoint()
    many = run_eval(slow, make_tasks("refusal,agent", SETTINGS), SETTINGS, tmp_path / "b", limit=8, progress=False,
                    concurrency=4)
    assert slow.most > 1 and many == one


def test_answer_cache_keeps_whole_records_and_drops_a_cut_one(tmp_path):
    from k3.eval.store import AnswerCache

    path = tmp_path / "answers.jsonl"
    cache = AnswerCache(path)
    cache.put("a", {"answer": "line\u2028separator and \u00e9"})
    cache.put("b", {"answer": "plain"})
    with open(path, "a") as f:
        f.write('{"key": "c", "rec')
    again = AnswerCache(path)
    assert again.records == {"a": {"answer": "line\u2028separator and \u00e9"}, "b": {"answer": "plain"}}
    assert path.read_bytes().endswith(b"\n")
