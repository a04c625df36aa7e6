"""The server's periodic activity line (issue 69: a minute-long CPU request ran with nothing on the log)."""

from __future__ import annotations

from types import MappingProxyType

from k3.serve.activity_log import ActivityLog


class Published:
    """An EngineClient's stats: a mapping replaced whole after every step."""

    def __init__(self, **stats):
        self.snap = MappingProxyType(stats)

    def step(self, **stats):
        self.snap = MappingProxyType(dict(self.snap, **stats))

    def stats(self):
        return self.snap


def test_a_busy_interval_logs_throughput_and_an_idle_one_logs_nothing():
    engine = Published(prompt_tokens=0, generated_tokens=0, running=0, waiting=0)
    log = ActivityLog(engine, interval_s=10)
    t0 = log._last_t
    assert log.line(t0 + 10) is None                                  # idle: no line
    engine.step(prompt_tokens=500, generated_tokens=20, running=1, waiting=2)
    assert log.line(t0 + 20) == ("running 1, waiting 2; prompt 50.0 tokens/s, generation 2.0 tokens/s over the "
                                 "last 10 s")


def test_a_step_that_runs_long_is_said_to_be_running():
    engine = Published(prompt_tokens=0, generated_tokens=0, running=0, waiting=0)
    log = ActivityLog(engine, interval_s=10)
    t0 = log._last_t
    engine.step(running=1)                  # admitted; then one step (a long prefill) runs with no new snapshot
    assert "has run" not in log.line(t0 + 10)
    assert log.line(t0 + 40).endswith("prompt 0.0 tokens/s, generation 0.0 tokens/s over the last 30 s; "
                                      "the current step has run for 30 s")
