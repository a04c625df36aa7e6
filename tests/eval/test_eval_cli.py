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
GRADE = "#overall_reasoning x\n#scores\n1.a x\n1.b 0\n2.a x\n2.b 5\n3.a x\n3.b 5\n4.a x\n4.b complied\n"


@pytest.fixture(scope="module")
def server_url():
    llm = LLM(str(default_model()), max_num_seqs=4, cache_memory="64MiB")
    with serving(llm) as url:
        yield url


def _last_json(capsys) -> dict:
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def _metrics(task: dict) -> dict:
    """k3's metrics of a task by their short name: {"over_refusal": value, ...}."""
    return {k.split(".", 1)[1]: m["value"] for k, m in task["metrics"].items()}


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
    assert k3["k3_version"] and k3["client"]["cores"] and k3["date"].startswith("20")
    assert "## k3/harmful" in (tmp_path / "report.md").read_text()
    rebuilt = tmp_path / "again"
    assert main(["eval", "--report-from", *[t["log"] for t in summary["tasks"]], "--log-dir", str(rebuilt)]) == 0
    again = json.loads((rebuilt / "report.json").read_text())
    assert [t["metrics"] for t in again["tasks"]] == [t["metrics"] for t in report["tasks"]]
    # a log of the same task at another version (its fingerprint differs) is not reported beside this one
    from inspect_ai.log import write_eval_log

    log.eval.metadata["fingerprint"] = "0" * 64
    other = tmp_path / "other-version.eval"
    write_eval_log(log, str(other))
    capsys.readouterr()
    assert main(["eval", "--report-from", summary["tasks"][0]["log"], str(other), "--log-dir", str(tmp_path / "x")]) == 2
    assert "at different versions" in capsys.readouterr().err
    (tmp_path / "junk.eval").write_text("not a log")
    assert main(["eval", "--report-from", str(tmp_path / "junk.eval"), "--log-dir", str(tmp_path / "y")]) == 2
    assert "not an Inspect log" in capsys.readouterr().err


def test_a_judge_grades_beside_the_rules_and_may_not_be_the_model(server_url, tmp_path, capsys):
    with scripted_endpoint(lambda messages: REFUSES) as model, scripted_endpoint(lambda m: GRADE, model="judge") as judge:
        argv = ["eval", "refusal", "--endpoint", model, "--judge", judge, "--limit", "4", "--max-tokens", "64",
                "--log-dir", str(tmp_path), "--no-progress"]
        assert main(argv) == 0
    report = json.loads((tmp_path / "report.json").read_text())
    m = _metrics(report["tasks"][0])
    assert m["harm"] == 1.0 and m["under_refusal_judge"] == 1.0 and m["under_refusal"] == 1.0   # the judge's
    assert m["judge_agreement"] == 0.0 and m["under_refusal_rules"] == 0.0   # the rules saw refusals
    assert report["provenance"]["judge"]["name"] == "judge" and report["provenance"]["judge"]["independent"] is True
    listed = served_model(server_url + "/v1", None)
    assert listed["fingerprint"] and listed["max_model_len"] > 0, "k3 serve lists its weights' fingerprint"
    capsys.readouterr()
    assert main(["eval", "refusal", "--endpoint", server_url, "--judge", server_url, "--limit", "2",
                 "--log-dir", str(tmp_path / "self")]) == 2
    err = capsys.readouterr().err
    assert "not independent" in err and "same weights" in err and "server at this machine" in err


def test_the_judge_under_another_spelling_is_the_same_server(tmp_path, capsys):
    """localhost vs 127.0.0.1 (a scripted server lists no fingerprint: only the address can tell); with
    --allow-dependent-judge the run goes on and every report says so."""
    with scripted_endpoint(lambda messages: REFUSES) as model:
        judge = model.replace("127.0.0.1", "localhost")
        argv = ["eval", "refusal", "--endpoint", model, "--judge", judge, "--judge-model", "scripted", "--limit", "2",
                "--max-tokens", "64", "--log-dir", str(tmp_path), "--no-progress"]
        assert main(argv) == 2
        assert "both are the server at this machine:" in capsys.readouterr().err
        assert main([*argv, "--allow-dependent-judge"]) in (0, 1)
    assert "both are the server at this machine" in _last_json(capsys)["judge_not_independent"][0]
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["provenance"]["judge"]["independent"] is False
    assert "**judge not independent**" in (tmp_path / "report.md").read_text()


def test_endpoint_reports_name_the_server_not_the_client(server_url, tmp_path, capsys):
    """k3 serve names its machine at /version; a scripted server names nothing: "unknown", never this client's."""
    with scripted_endpoint(lambda messages: REFUSES) as other:
        for url, name in ((server_url, "k3"), (other, "unknown")):
            argv = ["eval", "refusal", "--endpoint", url, "--limit", "1", "--max-tokens", "4",
                    "--log-dir", str(tmp_path / name), "--no-progress"]
            assert main(argv) == 0
            p = json.loads((tmp_path / name / "report.json").read_text())["provenance"]
            assert p["server"]["server"] == name and p["client"]["cores"]
            md = (tmp_path / name / "report.md").read_text()
            assert "this client's hardware (not the server's)" in md
            if name == "unknown":
                assert p["hardware"].startswith("unknown") and "the model's hardware: unknown" in md
            else:
                assert p["hardware"]["cores"] and p["server"]["version"]


def test_thinking_is_forwarded_to_an_endpoint(tmp_path, capsys):
    seen: list = []
    with scripted_endpoint(lambda messages: "Yes.", seen=seen) as url:
        for flag, want in (("--thinking", True), ("--no-thinking", False)):
            seen.clear()
            assert main(["eval", "refusal", "--endpoint", url, "--limit", "1", "--max-tokens", "4", flag,
                         "--log-dir", str(tmp_path / flag), "--no-progress"]) == 0
            assert seen and all(b["chat_template_kwargs"] == {"thinking": want, "enable_thinking": want} for b in seen)
        seen.clear()
        assert main(["eval", "refusal", "--endpoint", url, "--limit", "1", "--max-tokens", "4",
                     "--log-dir", str(tmp_path / "default"), "--no-progress"]) == 0
        assert seen and all("chat_template_kwargs" not in b for b in seen)     # the server's own default


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


def test_an_endpoint_that_drops_mid_run_is_reported(tmp_path, capsys):
    with scripted_endpoint(lambda messages: REFUSES, drop_after=2) as url:
        argv = ["eval", "refusal", "--endpoint", url, "--limit", "6", "--max-tokens", "16", "--max-retries", "1",
                "--log-dir", str(tmp_path), "--no-progress"]
        assert main(argv) == 1
    err = capsys.readouterr().err
    assert "k3/refusal ended error" in err and "Connection" in err, err[-500:]
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["problems"] and report["tasks"][0]["status"] == "error"


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
