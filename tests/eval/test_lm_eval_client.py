"""lm-evaluation-harness as a real client of `k3 serve`: its `local-completions` model, tokenizing through
the server's /tokenizer_info and /tokenize (vLLM's remote-tokenizer protocol), runs a log-likelihood task
and a generation task from local files, and agrees item by item with the same model run in-process
(log-likelihoods from its forward pass, greedy generation through k3.LLM). Log-likelihood sets run this
way: `k3 eval` leaves them to lm-evaluation-harness."""

from __future__ import annotations

import json

import pytest

import torch

from k3 import LLM, SamplingParams
from k3.defaults import default_model
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
        args = f"model=default,base_url={url}/v1/completions,tokenizer_backend=remote,max_length=512"
        return lm_eval.simple_evaluate(model="local-completions", model_args=args, tasks=["k3_mc", "k3_gen"],
                                       task_manager=TaskManager(include_path=str(tasks)), log_samples=True)


def _in_process() -> tuple[list[list[float]], list[str]]:
    """(log p(choice | question) for each choice of each MC item, each GEN item's greedy continuation)."""
    llm = LLM(str(default_model()), cache_memory="64MiB")
    tok = llm.tokenizer

    def loglikelihood(context: str, continuation: str) -> float:
        ctx, cont = tok.encode(context), tok.encode(continuation)   # apart, so the boundary is exact
        ids = ctx + cont
        with torch.no_grad():
            logits = llm.model(torch.tensor([ids[:-1]])).float()[0]
        lp = torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids[1:]).unsqueeze(-1))[:, 0]
        return float(lp[len(ctx) - 1:].sum())

    mc = [[loglikelihood(item["question"], " " + c) for c in item["choices"]] for item in MC]
    params = SamplingParams(max_tokens=MAX_TOKENS, temperature=0.0, stop=tuple(STOP))
    gen = [out.text for out in llm.generate([g["prompt"] for g in GEN], params)]
    return mc, gen


def test_lm_eval_through_k3_serve_agrees_with_the_model_in_process(lm_eval_run):
    mc, gen = _in_process()
    theirs = {name: sorted(samples, key=lambda s: s["doc_id"]) for name, samples in lm_eval_run["samples"].items()}
    for mine, sample in zip(mc, theirs["k3_mc"]):
        their_lls = [ll for ll, _greedy in sample["filtered_resps"]]
        assert_close(f"mc item {sample['doc_id']} log-likelihoods", their_lls, mine, 1e-5)
        assert bool(sample["acc"]) == (max(range(len(mine)), key=mine.__getitem__) == MC[sample["doc_id"]]["answer"])
    for mine, sample in zip(gen, theirs["k3_gen"]):
        assert sample["resps"][0][0] == mine, f"generation {sample['doc_id']} differs"
