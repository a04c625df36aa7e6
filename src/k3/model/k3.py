"""K3ForCausalLM: embedding -> decoder layers -> final AttnRes mix -> norm -> untied lm_head.

`model(input_ids)` is the full forward (no cache). `model(input_ids, state=model.new_state())` runs
a cached step: prefill then token-by-token decode continue the same `K3State`, and give the same
logits as one full forward. Weights may be stored in a narrower dtype than `compute_dtype`.
"""

from __future__ import annotations

import torch
from torch import nn

from k3.config.model import K3Config
from k3.layers.basic import Linear, RMSNorm, WeightOnly
from k3.layers.batch import ForwardBatch
from k3.layers.state import StateLayout, state_layout
from k3.layers.step_state import WindowStep
from k3.layers.decode_weights import forget_bound
from k3.model.block import DecoderLayer
from k3.model.dense_state import K3State
from k3.model.plan import Registers, output_steps, run_steps
from k3.model.plan_binding import decode_in_one_call
from k3.model.vision import Splice, splice_for
from k3.ops.dispatch import reference_only
from k3.model.vision import attach as attach_vision
from k3.model.vision import encode as encode_images
from k3.ops.linear import linear


class K3TextModel(nn.Module):
    def __init__(self, c: K3Config):
        super().__init__()
        self.config = c
        self.embed_tokens = WeightOnly(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(c, i) for i in range(c.num_hidden_layers))
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.output_steps = output_steps(c)
        if c.attn_res_block_size is not None:
            self.output_attn_res_norm = WeightOnly(c.hidden_size)
            self.output_attn_res_proj = WeightOnly(1, c.hidden_size)

    def forward(self, input_ids: torch.Tensor, batch: ForwardBatch, compute_dtype: torch.dtype,
                layer_states: list | None = None, splice: Splice | None = None,
                step_states: list | None = None) -> torch.Tensor:
        """input_ids [N] packed -> final normalised hidden states [N, hidden] in compute_dtype. `splice`:
        image rows that replace the embeddings at their positions. Per layer: `layer_states`, where prefill
        segments continue; `step_states`, the decode rows' (layers/step_state.py)."""
        h = self.embed_tokens.weight[input_ids].to(compute_dtype)
        if splice is not None and splice.positions.numel():
            h[splice.positions] = splice.rows.to(compute_dtype)
        bank: list[torch.Tensor] = []
        none = [None] * len(self.layers)
        for layer, state, steps in zip(self.layers, layer_states or none, step_states or [()] * len(self.layers)):
            h = layer(h, bank, batch, state, steps)
        regs = Registers(h, bank)
        run_steps(self.output_steps, self, regs, batch)
        return regs.x


class K3ForCausalLM(nn.Module):
    def __init__(self, c: K3Config, compute_dtype: torch.dtype = torch.float32, vision: bool = True):
        """vision=False leaves out the tower and projector of a checkpoint that has them (text only)."""
        super().__init__()
        self.config = c
        self.compute_dtype = compute_dtype
        self.model = K3TextModel(c)
        if not c.tie_word_embeddings:
            self.lm_head = Linear(c.hidden_size, c.vocab_size)
        self.vision = c.vision if vision else None
        if self.vision is not None:
            attach_vision(self, self.vision)
        self.decode_binding = None     # the whole decode plan, bound (model/plan_binding.py)
        # Decode rows in one native call for the whole model; False runs them layer by layer through the
        # modules (each sublayer's step still native), so module hooks fire. The bits are the same.
        self.one_call_decode = True

    def encode_images(self, pixel_values: torch.Tensor, grid_thw) -> list[torch.Tensor]:
        """pixel_values [sum t*h*w, 3, p, p], grid_thw [n, 3] (k3.media.prepare_image) -> per image its rows
        [(h/2)*(w/2), hidden] in compute_dtype: what replaces its `<|media_pad|>` tokens."""
        if self.vision is None:
            raise ValueError("this model has no vision tower: its checkpoint has none, or it was loaded with "
                             "vision=False (--no-vision)")
        with torch.inference_mode():
            if getattr(self, "vision_dtype", "float32") != "bfloat16":
                return encode_images(self.vision_tower, self.mm_projector, self.vision, pixel_values, grid_thw,
                                     self.compute_dtype)
            # Opt-in (EngineConfig.vision_dtype): products and attention in bf16, through PyTorch's own GEMMs (AMX
            # or AVX512_BF16 where the CPU has them), not the exact fp32 path; results: docs/benchmarks/results.md.
            with reference_only(), torch.autocast(pixel_values.device.type, dtype=torch.bfloat16):
                rows = encode_images(self.vision_tower, self.mm_projector, self.vision, pixel_values, grid_thw,
                                     self.compute_dtype)
            return [r.to(self.compute_dtype) for r in rows]

    def state_layout(self) -> StateLayout:
        return state_layout(self.config)

    def new_state(self, batch_size: int = 1) -> K3State:
        return K3State.new(self.config, batch_size)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden [..., hidden] (final-normed) -> [..., vocab] in compute_dtype."""
        head = self.model.embed_tokens if self.config.tie_word_embeddings else self.lm_head
        w = head.weight
        return linear(hidden, w)

    def forward_batch(self, input_ids: torch.Tensor, batch: ForwardBatch, layer_states: list | None,
                      logits_index: torch.Tensor | None = None, splice: Splice | None = None,
                      step_states: list | None = None) -> torch.Tensor:
        """The engine's entry: packed ids [N] -> logits [len(logits_index), vocab] (all N if None).
        `splice`: image rows for some of the N positions (prefill only). Per layer: `layer_states` (prefill
        segments) and `step_states` (decode rows, one per `batch.step_groups()`), from the state's owner."""
        if splice is None:
            logits = decode_in_one_call(self, input_ids, batch, step_states, logits_index)
            if logits is not None:
                return logits
        h = self.model(input_ids, batch, self.compute_dtype, layer_states, splice, step_states)
        return self.logits(h if logits_index is None else h[logits_index])

    def window_step(self, layer: int, replay: tuple[torch.Tensor, ...]) -> WindowStep:
        """The step that replays kept positions of KDA layer `layer`'s verify window from the inputs the
        window wrote to `replay` (`KdaStep.replay`), for the engine's rollback after a rejection."""
        return self.model.layers[layer].self_attn.window_step(replay)

    def weights_changed(self) -> None:
        """Weights were given new storage (a load, an int8 trunk, streamed experts or trunk, `layer.weight =
        nn.Parameter(...)`, `param.data = ...`): every native step and the whole decode plan bind again at
        their next use (layers/decode_weights.py). Writing into a weight in place needs no call."""
        forget_bound(self)
        self.decode_binding = None

    def _apply(self, fn, recurse: bool = True):
        out = super()._apply(fn, recurse)   # .to(), .float(), .half(): parameters get new storage
        self.weights_changed()
        return out

    def forward(self, input_ids: torch.Tensor, state: K3State | None = None, logits_to_keep: int = 0, *,
                pixel_values: torch.Tensor | None = None, grid_thw=None) -> torch.Tensor:
        """input_ids [B, T] int -> logits [B, T, vocab] in compute_dtype. With `state`, continues it.
        logits_to_keep=n > 0 (transformers' name): only the last n positions' logits, [B, n, vocab];
        a prompt's prefill needs one, and the vocabulary projection is a large share of its time.
        pixel_values, grid_thw: images whose rows replace the `<|media_pad|>` tokens of input_ids in order."""
        if input_ids.dim() != 2:
            raise ValueError(f"input_ids must be [batch, tokens], got shape {tuple(input_ids.shape)}")
        B, T = input_ids.shape
        vocab = self.config.vocab_size
        low, high = _id_range(input_ids)
        if low < 0 or high >= vocab:
            raise ValueError(f"token ids must be in [0, {vocab}), got min {low} max {high}")
        if state is not None and state.batch_size not in (None, B):
            raise ValueError(f"state holds {state.batch_size} sequences but input_ids has {B}")
        if logits_to_keep < 0:
            raise ValueError(f"logits_to_keep must be >= 0 (0 keeps all), got {logits_to_keep}")
        context = state.num_tokens if state is not None else 0
        batch = ForwardBatch.uniform(B, T, context)
        keep = min(logits_to_keep, T) if logits_to_keep else T
        index = None if keep == T else (torch.arange(B).unsqueeze(1) * T + torch.arange(T - keep, T)).reshape(-1)
        splice = None
        if pixel_values is not None:
            splice = splice_for(input_ids, self.encode_images(pixel_values, grid_thw), self.vision.media_pad_id)
        layer_states = step_states = None
        if state is not None:   # the bare model's own small runner: its state builds the decode rows' step states
            layer_states = state.layers
            step_states = state.step_states(batch, torch.empty(0, dtype=self.compute_dtype, device=input_ids.device))
        logits = self.forward_batch(input_ids.reshape(-1), batch, layer_states, index, splice, step_states)
        if state is not None:
            state.num_tokens += T
        return logits.view(B, keep, -1)


def _id_range(ids: torch.Tensor) -> tuple[int, int]:
    """(min, max) of a non-empty id tensor. A decode step's few ids go through a Python list: two cold
    ATen reductions and their reads back cost more than the list (benchmarks/decode_profile.py)."""
    if ids.numel() == 0:
        return 0, 0
    if ids.numel() <= 64:
        flat = ids.reshape(-1).tolist()
        return min(flat), max(flat)
    return int(ids.min()), int(ids.max())
