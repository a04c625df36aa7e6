"""k3's metric names, one scheme for `k3 eval`'s reports, `k3 check`'s requirements and the docs: TASK.METRIC for
quality (`humaneval.pass@1`, `refusal.under_refusal`), latency names (`ttft.p90`), and the machine's
(`peak_rss`). Every value carries the n it rests on and, where it is an estimate, its 95 % interval, so
a requirement is decided on the interval's bound (see check/thresholds.py)."""
