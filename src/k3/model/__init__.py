"""K3 model assembly: decoder layers, the causal LM, and checkpoint loading."""

from k3.layers.batch import ForwardBatch
from k3.model.k3 import K3ForCausalLM, K3State
from k3.model.weights import load_model

__all__ = ["ForwardBatch", "K3ForCausalLM", "K3State", "load_model"]
