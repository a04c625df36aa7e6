"""Text files -> a training data directory: tokenizer/, train.bin, val.bin, meta.json.

The last `val_fraction` of each file is held out (whole passages, not random windows), so
validation text is never seen in training.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from k3.chat import K3Tokenizer
from k3.chat.tokenizer import save_tokenizer
from k3.train.tokenizer import train_tokenizer


def prepare(texts: list[str | Path], out_dir: str | Path, vocab_size: int = 4096, val_fraction: float = 0.02,
            tokenizer_dir: str | Path | None = None) -> dict:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    sources = [Path(t) for t in texts]
    missing = [str(p) for p in sources if not p.is_file()]
    if missing:
        raise FileNotFoundError(f"no such text file(s): {missing}")
    contents = [p.read_text(encoding="utf-8") for p in sources]
    if tokenizer_dir is None:
        # Plain text, not XTML conversations: the model will not close a think channel (thinking off).
        tokenizer_dir = save_tokenizer(out / "tokenizer", train_tokenizer(contents, vocab_size), thinking=False)
    tok = K3Tokenizer.load(tokenizer_dir)
    dtype = np.uint16 if tok.vocab_size <= 2 ** 16 else np.uint32
    train, val, per_file = [], [], {}
    for path, text in zip(sources, contents):
        ids = np.asarray(tok.encode(text), dtype=dtype)
        cut = int(len(ids) * (1 - val_fraction))
        train.append(ids[:cut])
        val.append(ids[cut:])
        per_file[path.name] = {"tokens": int(len(ids)), "chars": len(text)}
    np.concatenate(train).tofile(out / "train.bin")
    np.concatenate(val).tofile(out / "val.bin")
    meta = {"vocab_size": tok.vocab_size, "dtype": np.dtype(dtype).name, "tokenizer": str(Path(tokenizer_dir)),
            "val_fraction": val_fraction, "files": per_file,
            "train_tokens": int(sum(len(t) for t in train)), "val_tokens": int(sum(len(v) for v in val))}
    (out / "meta.json").write_text(json.dumps(meta, indent=2))
    return meta
