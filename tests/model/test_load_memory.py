"""Peak RSS while loading stays near the size of the weights (never 2x), measured in a fresh process."""

import json
import subprocess
import sys

import pytest

from k3.config.presets import tiny
from k3.testing import make_checkpoint
from k3.tools.inspect import summarize

# Peak = VmHWM of the probe's own address space. ru_maxrss would not do: Linux carries it across
# fork + exec, so a child starts "peaking" at the parent's RSS.
PROBE = r"""
import json, re, sys, psutil, torch, k3
# Warm torch up (kernels, thread pools) on a tiny model, so the baseline holds the fixed costs.
with torch.inference_mode():
    k3.load(sys.argv[3])(torch.zeros(1, 4, dtype=torch.long))
base = psutil.Process().memory_info().rss
model = k3.load(sys.argv[1], dtype=None if sys.argv[2] == "none" else torch.float32)
with torch.inference_mode():
    model(torch.zeros(1, 4, dtype=torch.long))   # touch every lazily mapped page
weights = sum(t.numel() * t.element_size() for t in list(model.parameters()) + list(model.buffers()))
status = open("/proc/self/status").read()
peak = int(re.search(r"VmHWM:\s+(\d+) kB", status).group(1)) * 1024
print(json.dumps({"base": base, "peak": peak, "weights": weights}))
"""

# ~150 MB of tensors, most of them packed experts, as in K3.
CONFIG = tiny(hidden_size=256, vocab_size=8000, num_experts=160, moe_intermediate_size=512,
              routed_expert_hidden_size=512, intermediate_size=512)


@pytest.fixture(scope="module")
def big_checkpoint(tmp_path_factory):
    return make_checkpoint(tmp_path_factory.mktemp("mem"), CONFIG, num_shards=4)


@pytest.mark.parametrize("dtype", ["none", "fp32"])
def test_peak_rss_while_loading(big_checkpoint, tiny_checkpoint, dtype):
    out = subprocess.run([sys.executable, "-c", PROBE, str(big_checkpoint), dtype, str(tiny_checkpoint)],
                         capture_output=True, text=True, check=True)
    m = json.loads(out.stdout.strip().splitlines()[-1])
    assert m["weights"] >= 0.99 * summarize(CONFIG).bytes_tensors
    grown = m["peak"] - m["base"]
    # Weights, plus at most one shard's source bytes in flight, plus activations and allocator slack.
    assert grown < 1.4 * m["weights"], m
