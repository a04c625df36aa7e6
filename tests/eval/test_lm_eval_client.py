"""lm-evaluation-harness as a real client of `k3 serve`: its `local-completions` model, tokenizing through
the server's /tokenizer_info and /tokenize (vLLM's remote-tokenizer protocol), runs a log-likelihood task
and a generation task from local files, and agrees item by item with `k3 eval` run in-process on the
same items."""

from __future__ import annotations

import json

import pytest

from k3 import LLM
from k3.defaults import default_model
from k3.eval.backends.local import LocalBackend
from k3.eval.registry import make_tasks
from k3.eval.runner import run_eval
from k3.eval.tasks.base import Settings
from k3.testing.serving import serving
from k3.testing.tolerance import assert_close

pytest.importorskip("lm_eval", reason="the [eval] extra (lm-eval) is not installed")

MC = [{"question": "The cat sat on the", "choices": ["mat.", "xylophone quantum", "door"], "answer": 0},
      {"question": "Once upon a time there", "choices": ["was", "purple seven"], "answer": 0},
      {"question": "She opened the door and", "choices": ["walked in.", "the of the"], "answer": 1}]
GEN = [{"prompt": "The king said to his", "answer": "father"},
       {"prompt": "And the LORD spake unto", "answer": "Moses"},
       {"prompt": "It was a dark and", "answer": "stormy"}]
STOP, MAX_TOKENS = [",", ".", "\n"], 16



def _task(tasks, name: str, data, output_type: str, **fields) -> None:
    """An lm-eval task file reading the JSONL file `data` (JSON is YAML, so json.dumps writes it)."""
    spec = {"task": name, "dataset_path": "json", "dataset_kwargs": {"data_files": {"test": str(data)}},
            "test_split": "test", "output_type": output_type, **fields}
    (tasks / f"{name}.yaml").write_text(json.dumps(spec, indent=1))


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture()
def lm_eval_run(tmp_path, monkeypatch):
    """lm-eval's results and logged samples for both tasks, run against a k3 server."""
    for var in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE"):
        monkeypatch.setenv(var, "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    import lm_eval
    from lm_eval.tasks import TaskManager

    tasks = tmp_path / "tasks"
    tasks.mkdir()
    _task(tasks, "k3_mc", _jsonl(tmp_path / "mc.jsonl", MC), "multiple_choice", doc_to_text="{{question}}",
          doc_to_choice="{{choices}}", doc_to_target="{{answer}}", metric_list=[{"metric": "acc"}])
    _task(tasks, "k3_gen", _jsonl(tmp_path / "gen.jsonl", GEN), "generate_until", doc_to_text="{{prompt}}",
          doc_to_target="{{answer}}", metric_list=[{"metric": "exact_match"}],
          generation_kwargs={"until": STOP, "max_gen_toks": MAX_TOKENS, "do_sample": False, "temperature": 0},
          filter_list=[{"name": "strip", "filter": [{"function": "remove_whitespace"}, {"function": "take_first"}]}])
    llm = LLM(str(default_model()), max_num_seqs=4, cache_memory="64MiB")
    with serving(llm) as url:
        args = f"model=default-model,base_url={url}/v1/completions,tokenizer_backend=remote,max_length=512"
        return lm_eval.simple_evaluate(model="local-completions", model_args=args, tasks=["k3_mc", "k3_gen"],
                                       task_manager=TaskManager(include_path=str(tasks)), log_samples=True)


def _in_process(tmp_path) -> dict:
    mc = _jsonl(tmp_path / "k3-mc.jsonl", MC)
    gen = _jsonl(tmp_path / "k3-gen.jsonl", [r | {"mode": "completion", "stop": STOP, "max_tokens": MAX_TOKENS}
                                             for r in GEN])
    settings = Settings()
    backend = LocalBackend(default_model(), cache_memory="64MiB")
    return run_eval(backend, make_tasks(f"mc:{mc},gen:{gen}", settings), settings, tmp_path / "k3", progress=False)["tasks"]


def test_lm_eval_through_k3_serve_agrees_with_k3_eval(lm_eval_run, tmp_path):
    ours = _in_process(tmp_path)
    theirs = {name: sorted(samples, key=lambda s: s["doc_id"]) for name, samples in lm_eval_run["samples"].items()}

    for mine, sample in zip(ours["mc:k3-mc.jsonl"]["records"], theirs["k3_mc"]):
        their_lls = [ll for ll, _greedy in sample["filtered_resps"]]
        assert_close(f"mc item {sample['doc_id']} log-likelihoods", their_lls, mine["loglikelihoods"], 1e-5)
        assert bool(sample["acc"]) == mine["correct"]
    assert lm_eval_run["results"]["k3_mc"]["acc,none"] == pytest.approx(ours["mc:k3-mc.jsonl"]["scores"]["acc"]["mean"])

    stopped = 0
    for mine, sample in zip(ours["gen:k3-gen.jsonl"]["records"], theirs["k3_gen"]):
        assert sample["resps"][0][0] == mine["answer"], f"generation {sample['doc_id']} differs"
        if not mine["truncated"]:  # k3 leaves replies cut by the token limit out of its score
            stopped += 1
            assert bool(sample["exact_match"]) == mine["correct"]
    assert stopped >= 1, "no reply ended at a stop string: the items test nothing about scoring"
