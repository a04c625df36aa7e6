"""A K3 checkpoint (official layout) -> GGUF, with the converter llama.cpp ships.

The converter reads the vocabulary through transformers' `AutoTokenizer` with remote code, i.e.
Moonshot's tokenizer module, which a test checkpoint does not have (and k3 does not copy). The child
process below swaps in `StandInTokenizer`, built from the checkpoint's own `tiktoken.model` by k3's
loader, exposing just what the converter's kimi-k2 vocabulary path reads (mergeable ranks, special
tokens, eos id), and tells the converter the pre-tokenizer is kimi-k2's (its check is a hash of the
released vocabulary's output, which a test vocabulary cannot match). Everything else (tensor
mapping, MXFP4 repacking, MLA split, attention-residual fusion) is the converter's own.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from k3.testing.llama_cpp.build import AnchorError, llama_dir

OUTTYPES = ("f32", "bf16", "q8_0")   # q8_0: the trunk as llama.cpp's Q8_0 (compare.py --quantised)

_CHILD = r'''
import runpy, sys
from types import SimpleNamespace
llama_dir, checkpoint, out, outtype = sys.argv[1:5]
sys.path[:0] = [llama_dir, llama_dir + "/gguf-py"]

import transformers
from k3.chat.tokenizer import K3Tokenizer

class StandInTokenizer:
    """The attributes llama.cpp's kimi-k2 vocabulary path reads, from k3's tokenizer."""
    def __init__(self, directory):
        tok = K3Tokenizer.load(directory)
        self.model = SimpleNamespace(_mergeable_ranks=tok.encoding._mergeable_ranks)
        self.special_tokens = dict(tok.specials)
        self.eos_id = tok.specials.get("[EOS]", tok.end_of_msg_id)

transformers.AutoTokenizer.from_pretrained = staticmethod(lambda d, **kw: StandInTokenizer(d))
from conversion.base import TextModel
TextModel.get_vocab_base_pre = lambda self, tokenizer: "kimi-k2"
sys.argv = ["convert_hf_to_gguf.py", checkpoint, "--outfile", out, "--outtype", outtype]
runpy.run_path(llama_dir + "/convert_hf_to_gguf.py", run_name="__main__")
'''


def convert(checkpoint: str | Path, out: str | Path, outtype: str = "bf16", root: Path | None = None) -> Path:
    """Write `out` (GGUF). outtype bf16 keeps the trunk as stored; f32 widens it (exact); q8_0 quantises
    it (llama.cpp's 8-bit blocks of 32). MXFP4 experts stay MXFP4 in every case; bf16 experts
    (expert_format None) follow outtype."""
    if outtype not in OUTTYPES:
        raise ValueError(f"outtype must be one of {OUTTYPES}, got {outtype!r}")
    checkpoint, out = Path(checkpoint), Path(out)
    if not (Path(checkpoint) / "tiktoken.model").is_file():
        raise AnchorError(f"{checkpoint} has no tiktoken.model; llama.cpp's converter needs the vocabulary "
                          "(make_checkpoint(..., tokenizer=True) writes one)")
    tmp = out.with_name(out.name + ".partial")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(Path(__file__).parents[3]),
                                                                  os.environ.get("PYTHONPATH")) if p)}
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(llama_dir(root)), str(checkpoint), str(tmp), outtype],
                          capture_output=True, text=True, env=env)
    if proc.returncode != 0 or not tmp.is_file():
        tmp.unlink(missing_ok=True)
        raise AnchorError(f"llama.cpp's converter failed on {checkpoint}:\n{proc.stderr[-3000:]}")
    tmp.replace(out)
    return out
