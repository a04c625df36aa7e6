"""k3's report from Inspect logs (issue 43): both truncation views, rates by group with intervals, interventions
by kind; stratified --limit; the code-hallucination stages of `k3/code`; the constraint sweep's lengths."""

from __future__ import annotations

import pytest

pytest.importorskip("inspect_ai", reason="Inspect AI comes with the [eval] extra")

from inspect_ai import eval as inspect_eval  # noqa: E402
from inspect_ai.model import get_model  # noqa: E402

from inspect_support import always, output  # noqa: E402
from k3.eval.inspect import report  # noqa: E402
from k3.eval.inspect.constraints import constraints, obeys, sweep  # noqa: E402
from k3.eval.inspect.filler import comply, words  # noqa: E402
from k3.eval.inspect.sampling import stratified  # noqa: E402
from k3.eval.inspect.tasks import code  # noqa: E402
from sandbox_support import need_namespaces  # noqa: E402


def test_stratified_limits_reach_every_class_first():
    items = [("safe", c, i) for c in "abc" for i in range(5)] + [("unsafe", "x", i) for i in range(3)]
    picked = stratified(items, (lambda t: t[0], lambda t: t[1]), 4)
    assert [p[0] for p in picked] == ["safe", "unsafe", "safe", "unsafe"] and {p[1] for p in picked} == {"a", "b", "x"}
    assert stratified(items, (lambda t: t[0],), None) != items and sorted(stratified(items, (), None)) == sorted(items)


def test_the_report_gives_both_truncation_views_and_rates_by_group(tmp_path):
    answers = [output("FOUR OVER"), output("four", stop_reason="max_tokens"), output("Eight legs.")]
    task = constraints(lengths="1024", per_length=3)
    [log] = inspect_eval(task, model=get_model("mockllm/model", custom_outputs=answers, memoize=False),
                         log_dir=str(tmp_path), display="none")
    r = report.task_report(log)
    assert r["main"]["truncated"] == 1 and r["main"]["n"] == 3
    kept = [s.scores["rule_kept"].value for s in log.samples]
    assert r["main"]["truncated_as_failed"] == pytest.approx(sum(kept) / 3)
    assert r["main"]["excluding_truncated"] == pytest.approx(sum(kept) / 2)
    assert r["groups"]["1024"]["n"] == 2 and r["groups"]["1024"]["ci95"][0] <= r["groups"]["1024"]["rate"]
    paths = report.write(report.build([log]), tmp_path / "out")
    assert "counting them as failed" in paths[1].read_text()


def test_a_sample_whose_output_holds_no_choice_is_not_truncated():
    """An agent stopped by a limit before any answer leaves an output with no choice; the report counted it
    through Inspect's stop_reason, which raised (seen on a loaded machine in the sim3d cheat run)."""
    from types import SimpleNamespace

    from inspect_ai.model import ModelOutput

    assert report.truncated(SimpleNamespace(output=ModelOutput(model="m", choices=[]))) is False
    cut = ModelOutput.from_content("m", "partial", stop_reason="max_tokens")
    assert report.truncated(SimpleNamespace(output=cut)) is True


def test_the_sweep_doubles_to_the_context_and_rules_are_checked():
    assert sweep("auto", 36864) == [1024, 2048, 4096, 8192, 16384, 32768]
    assert sweep("auto", 131072)[-1] == 65536 and sweep("500,200", 0) == [200, 500]
    with pytest.raises(ValueError, match="no room"):
        sweep("auto", 2048)
    assert words(142) == "one hundred and forty-two" and words(90) == "ninety"
    for check in ("upper", "suffix:Over and out.", "json_answer", "no_digits", "max_words:30"):
        assert obeys(check, comply(check, "Forty-two"))
    assert not obeys("no_digits", "42") and not obeys("json_answer", "{}")


def test_code_answers_are_taken_through_the_hallucination_stages(tmp_path):
    need_namespaces()
    good = "```python\nfrom datetime import date, timedelta\n\ndef add_days(s, n):\n    return (date.fromisoformat(s) + timedelta(days=n)).isoformat()\n```"
    invented = "```python\nimport datetimez\n\ndef add_days(s, n):\n    return helper(datetimez.parse(s), n)\n```"
    for answer, passes, stage in ((good, 1.0, "passes"), (invented, 0.0, "imports_exist")):
        [log] = inspect_eval(code(limit=1), model=always(answer), log_dir=str(tmp_path), display="none")
        sc = log.samples[0].scores["code_stages"]
        assert sc.value == passes and sc.metadata["stages"][stage] is bool(passes)
        assert log.results.scores[0].metrics["has_code"].value == 1.0
    assert sc.metadata["missing_imports"] == ["datetimez"] and sc.metadata["undefined_calls"] == ["helper"]


def test_contrast_pairs_catch_a_model_that_refuses_on_the_verb(tmp_path):
    from k3.eval.inspect.contrast import FRAMES, contrast_pairs
    from k3.eval.inspect.refusal import refusal

    rows = contrast_pairs()
    assert len({r["id"] for r in rows}) == len(rows)
    assert {(r["category"], r["kind"]) for r in rows} == {(f"contrast/{v.replace(' ', '-')}", k)
                                                          for v in FRAMES for k in ("safe", "unsafe")}
    verbs = tuple(FRAMES)

    def keyed_on_the_verb(messages, tools, tool_choice, config):
        asked = messages[-1].text.lower()
        return output("I'm sorry, but I can't help with that." if any(v in asked for v in verbs) else "Sure, here it is.")

    task = refusal()
    task.dataset = task.dataset.filter(lambda s: s.metadata["category"].startswith("contrast/"))
    [log] = inspect_eval(task, model=get_model("mockllm/model", custom_outputs=keyed_on_the_verb, memoize=False),
                         log_dir=str(tmp_path), display="none")
    m = {k: v.value for k, v in log.results.scores[0].metrics.items()}
    assert m["over_refusal"] == 1.0 and m["under_refusal"] == 0.0     # every harmless twin refused
