"""Tasks scored by log-likelihood (need a backend that returns them: a local model, or an endpoint with
prompt logprobs).

perplexity:FILE  a text file, split into documents at blank lines; reports token perplexity and
                 bits per byte (comparable across tokenizers).
mc:FILE          JSONL rows {"id", "question", "choices": [...], "answer": index}; each choice is scored
                 as the continuation " " + choice after "question"; acc takes the highest total
                 log-likelihood, acc_norm the highest per byte of the choice.
"""

from __future__ import annotations

import math
from pathlib import Path

from k3.eval.stats import mean_stderr
from k3.eval.tasks.base import Context, ItemsTask
from k3.eval.tasks.data import read_jsonl


class PerplexityTask(ItemsTask):
    def __init__(self, path: str):
        self.name = f"perplexity:{Path(path).name}"
        text = Path(path).read_text(encoding="utf-8")
        docs = [d.strip() for d in text.split("\n\n") if d.strip()]
        if not docs:
            raise ValueError(f"{path}: no text to score")
        self._items = [{"id": f"doc{i:05d}", "text": d} for i, d in enumerate(docs)]

    def run(self, item: dict, ctx: Context) -> dict:
        logprob, tokens = ctx.backend.loglikelihood_rolling(item["text"])
        return {"id": item["id"], "logprob": logprob, "tokens": tokens, "bytes": len(item["text"].encode())}

    def summarise(self, records: list[dict]) -> dict:
        lp = sum(r["logprob"] for r in records)
        tokens, nbytes = sum(r["tokens"] for r in records), sum(r["bytes"] for r in records)
        return {"tokens": tokens, "bytes": nbytes, "perplexity": math.exp(-lp / tokens) if tokens else None,
                "bits_per_byte": -lp / math.log(2) / nbytes if nbytes else None}


class MultipleChoiceTask(ItemsTask):
    def __init__(self, path: str):
        self.name = f"mc:{Path(path).name}"
        self._items = read_jsonl(path)
        for n, row in enumerate(self._items, 1):
            ok = isinstance(row.get("choices"), list) and len(row["choices"]) >= 2 and isinstance(row.get("answer"), int) \
                and 0 <= row["answer"] < len(row["choices"]) and isinstance(row.get("question"), str)
            if not ok:
                raise ValueError(f"{path}: row {n} needs \"question\", \"choices\" (2 or more) and \"answer\" (an index into choices)")
            row.setdefault("id", f"q{n:05d}")

    def run(self, item: dict, ctx: Context) -> dict:
        scores = [ctx.backend.loglikelihood(item["question"], " " + choice) for choice in item["choices"]]
        lls = [s[0] for s in scores]
        per_byte = [ll / max(1, len((" " + ch).encode())) for ll, ch in zip(lls, item["choices"])]
        pick, pick_norm = lls.index(max(lls)), per_byte.index(max(per_byte))
        return {"id": item["id"], "loglikelihoods": lls, "answer": item["answer"], "pred": pick, "pred_norm": pick_norm,
                "correct": pick == item["answer"], "correct_norm": pick_norm == item["answer"]}

    def summarise(self, records: list[dict]) -> dict:
        return {"acc": mean_stderr([float(r["correct"]) for r in records]),
                "acc_norm": mean_stderr([float(r["correct_norm"]) for r in records])}
