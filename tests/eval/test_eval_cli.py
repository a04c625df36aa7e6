"""`k3 eval` end to end over Inspect: against scripted endpoints and a real k3 server over loopback, and on the
bundled local model. Every run leaves Inspect logs and k3's report derived from them."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("inspect_ai", reason="Inspect AI comes with the [eval] extra")

from inspect_ai.log import read_eval_log  # noqa: E402

from k3 import LLM  # noqa: E402
from k3.cli.main import main  # noqa: E402
from k3.defaults import default_model  # noqa: E402
from k3.eval.inspect.provenance import served_model  # noqa: E402
from k3.testing.serving import serving  # noqa: E402
from scripted_server import scripted_endpoint  # noqa: E402

REFUSES = "I'm sorry, but I can't help with that."
# A judge that disagrees with the rules on every answer: it calls each refusal full, harmful compliance.
GRADE = json.dumps({"label": "full_compliance", "refused": 0, "specific": 5, "convincing": 5})


@pytest.fixture(scope="module")
def server_url():
    llm = LLM(str(default_model()), max_num_seqs=4, cache_memory="64MiB")
    with serving(llm) as url:
        yield url


def _last_json(capsys) -> dict:
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def _metrics(task: dict) -> dict:
    return next(iter(task["metrics"].values()))


def test_an_always_refusing_endpoint_over_refuses_all_and_under_refuses_none(tmp_path, capsys):
    with scripted_endpoint(lambda messages: REFUSES) as url:
        argv = ["eval", "refusal", "harmful", "--endpoint", url, "--limit", "24", "--max-tokens", "64",
                "--log-dir", str(tmp_path), "--no-progress"]
        assert main(argv) == 0
    summary = _last_json(capsys)
    report = json.loads((tmp_path / "report.json").read_text())
    refusal, harmful = report["tasks"]
    assert _metrics(refusal)["over_refusal"] == 1.0 and _metrics(refusal)["under_refusal"] == 0.0
    assert _metrics(harmful)["under_refusal"] == 0.0
    assert {g.split("/")[-1] for g in harmful["groups"]} == {"none", "roleplay", "prefix", "suppression", "fiction"}
    assert [t["status"] for t in summary["tasks"]] == ["success", "success"]
    log = read_eval_log(summary["tasks"][0]["log"])          # Inspect's own log, with k3's provenance
    k3 = log.eval.metadata["k3"]
    assert k3["k3_version"] and k3["hardware"]["cores"] and k3["date"].startswith("20")
    assert "## k3/harmful" in (tmp_path / "report.md").read_text()
    rebuilt = tmp_path / "again"
    assert main(["eval", "--report-from", *[t["log"] for t in summary["tasks"]], "--log-dir", str(rebuilt)]) == 0
    again = json.loads((rebuilt / "report.json").read_text())
    assert [t["metrics"] for t in again["tasks"]] == [t["metrics"] for t in report["tasks"]]


def test_a_judge_grades_beside_the_rules_and_may_not_be_the_model(server_url, tmp_path, capsys):
    with scripted_endpoint(lambda messages: REFUSES) as model, scripted_endpoint(lambda m: GRADE, model="judge") as judge:
        argv = ["eval", "refusal", "--endpoint", model, "--judge", judge, "--limit", "4", "--max-tokens", "64",
                "--log-dir", str(tmp_path), "--no-progress"]
        assert main(argv) == 0
    report = json.loads((tmp_path / "report.json").read_text())
    m = _metrics(report["tasks"][0])
    assert m["judged"] == 4 and m["harm"] == 1.0 and m["judge_under_refusal"] == 1.0
    assert m["rule_judge_agreement"] == 0.0 and m["under_refusal"] == 0.0   # the rules saw refusals
    assert report["provenance"]["judge"]["name"] == "judge"
    listed = served_model(server_url + "/v1", None)
    assert listed["fingerprint"] and listed["max_model_len"] > 0, "k3 serve lists its weights' fingerprint"
    capsys.readouterr()
    assert main(["eval", "refusal", "--endpoint", server_url, "--judge", server_url, "--limit", "2",
                 "--log-dir", str(tmp_path / "self")]) == 2
    assert "same weights" in capsys.readouterr().err


def test_the_constraint_sweep_on_the_local_model_reaches_each_length(tmp_path, capsys):
    argv = ["eval", "constraints", "--model", "default", "-T", "lengths=400,900", "-T", "per_length=2",
            "--max-tokens", "4", "--no-thinking", "--cache-memory", "64MiB", "--log-dir", str(tmp_path), "--no-progress"]
    assert main(argv) == 0
    log = read_eval_log(_last_json(capsys)["tasks"][0]["log"])
    reached = {(s.metadata["tokens"], s.metadata["counted_by"]) for s in log.samples}
    assert {t for t, _ in reached} == {400, 900} and {c for _, c in reached} == {"k3 tokenizer"}
    assert all(0.6 * s.metadata["tokens"] <= s.metadata["reached"] <= s.metadata["tokens"] for s in log.samples)
    assert log.eval.metadata["k3"]["model_fingerprint"]


@pytest.mark.parametrize("argv,message", [
    (["eval", "mc:x.jsonl", "--endpoint", "http://127.0.0.1:9"], "lm-evaluation-harness"),
    (["eval", "refusal", "--endpoint", "http://127.0.0.1:9", "--served-model-name", "m", "-T", "nope=1"],
     "no task given takes the argument nope"),
    (["eval", "refusal"], "--model PATH"),
    (["eval", "--model", "default"], "name at least one task"),
])
def test_bad_runs_are_refused_before_anything_runs(argv, message, capsys):
    assert main(argv) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("given", [1024, "1024", [1024], "1024,", "[1024]"])
def test_a_one_entry_list_argument_arrives_in_any_shape(given, tmp_path, capsys):
    """-T lengths=1024 reaches the task as a number (JSON), as it would as YAML from Inspect's own -T."""
    from k3.cli.eval import _task_args
    from k3.eval.inspect.constraints import constraints

    value = _task_args([f"lengths={given}"])["lengths"] if isinstance(given, str) else given
    assert constraints(lengths=value, per_length=1).metadata["lengths"] == [1024]


def test_a_bad_list_argument_names_itself(capsys):
    argv = ["eval", "constraints", "--endpoint", "http://127.0.0.1:9", "--served-model-name", "m",
            "-T", "lengths=long", "--no-progress"]
    assert main(argv) == 2
    assert "lengths='long'" in capsys.readouterr().err
