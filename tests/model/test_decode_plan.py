"""The decode plan (model/plan.py) run three ways gives one set of bits: the whole plan in one native call
(decode rows), the plan op by op with each sublayer's registered step one native call (layers/steps.py),
and the plan op by op through the modules and the registry (autograd on: the dispatch still picks the
kernels, since the weights need no gradient)."""

import dataclasses

import pytest
import torch

import k3
import k3.model.k3 as k3_model
from k3.engine import LLM, SamplingParams
import k3.layers.kda as kda_module
import k3.layers.mla as mla_module
import k3.layers.mlp as mlp_module
import k3.layers.moe as moe_module
from k3.model import plan_binding
from k3.ops.dispatch import reference_only

STEP_OPS = {"attention": ((kda_module, "kda_layer_step"), (mla_module, "mla_layer_step")),
            "ffn": ((moe_module, "moe_layer_step"), (mlp_module, "mlp_layer_step"))}

IDS = torch.tensor([[3, 17, 40, 9, 21, 2, 33], [8, 1, 30, 12, 5, 44, 7], [19, 2, 2, 6, 50, 11, 4]])
STEPS = ((5, 9, 1), (11, 3, 60), (1, 1, 2))


def _decode(model, batch: int) -> list[torch.Tensor]:
    state = model.new_state(batch)
    out = [model(IDS[:batch], state)]
    return out + [model(torch.tensor(step[:batch]).view(batch, 1), state) for step in STEPS]


def _count_paths(monkeypatch) -> dict[str, int]:
    """How often each native form answered: the whole plan, a sublayer's attention or FFN step."""
    counts = {"whole": 0, "attention": 0, "ffn": 0}
    whole = k3_model.decode_in_one_call

    def counted_whole(*args):
        out = whole(*args)
        counts["whole"] += out is not None
        return out

    monkeypatch.setattr(k3_model, "decode_in_one_call", counted_whole)
    for kind, ops in STEP_OPS.items():
        for module, name in ops:
            op = getattr(module, name)

            def counted(*args, _native=op.native, _kind=kind):
                counts[_kind] += 1
                return _native(*args)

            monkeypatch.setattr(module, name, dataclasses.replace(op, native=counted))
    return counts


def _op_by_op(monkeypatch) -> None:
    monkeypatch.setattr(k3_model, "decode_in_one_call", lambda *args: None)


def _modules_only(monkeypatch) -> None:
    """Op by op, and every sublayer through its modules (`forward_ops`): no registered step takes a row."""
    _op_by_op(monkeypatch)
    for ops in STEP_OPS.values():
        for module, name in ops:
            monkeypatch.setattr(module, name, dataclasses.replace(getattr(module, name), supports=lambda *a: False))


@pytest.mark.parametrize("batch", [1, 3])
def test_the_three_ways_to_run_the_plan_give_the_same_bits(tiny_checkpoint, monkeypatch, batch):
    model = k3.load(tiny_checkpoint)
    counts = _count_paths(monkeypatch)
    with torch.enable_grad():
        modules = _decode(model, batch)
    assert not any(counts.values()), "under autograd every step runs its module"
    with torch.inference_mode():
        whole = _decode(model, batch)
    assert counts["whole"] == len(STEPS), "every decode step is one native call"
    assert counts["attention"] == 0, "the prompt's rows: no attention step"
    assert counts["ffn"] > 0, "the prompt's few rows take the FFNs' native steps"
    _op_by_op(monkeypatch)
    counts.update(whole=0, attention=0, ffn=0)
    with torch.inference_mode():
        steps = _decode(model, batch)
    layers = len(model.model.layers)
    assert counts["attention"] == layers * len(STEPS), "op by op, every attention step of every token is native"
    for a, b, c in zip(modules, whole, steps):
        assert torch.equal(a, b) and torch.equal(a, c)


def test_reference_only_runs_no_native_step(tiny_checkpoint, monkeypatch):
    model = k3.load(tiny_checkpoint)
    counts = _count_paths(monkeypatch)
    with torch.inference_mode(), reference_only():
        _decode(model, 1)
    assert not any(counts.values())


def test_engine_decode_runs_the_whole_plan_with_the_op_by_op_bits(tiny_checkpoint, monkeypatch):
    """The engine's paged state slots (ragged batches) take the one-call plan too."""
    counts = _count_paths(monkeypatch)
    llm = LLM(tiny_checkpoint, max_num_seqs=4)
    prompts = [IDS[0].tolist(), IDS[1, :4].tolist(), IDS[2, :6].tolist()]
    params = SamplingParams(max_tokens=6, temperature=0)
    fast = [o.token_ids for o in llm.generate(prompts, params)]
    assert counts["whole"]
    _op_by_op(monkeypatch)
    assert [o.token_ids for o in llm.generate(prompts, params)] == fast
    assert counts["attention"]
    _modules_only(monkeypatch)
    assert [o.token_ids for o in llm.generate(prompts, params)] == fast


def test_the_plan_binds_once_and_again_only_when_weights_change(tiny_checkpoint, monkeypatch):
    """Nothing is checked per step: a binding is rebuilt when `model.weights_changed()` says the weights
    were replaced (no hook on torch sees a registration), and an in-place write is read as it is."""
    model = k3.load(tiny_checkpoint)
    binds = []
    original = plan_binding._whole_plan
    monkeypatch.setattr(plan_binding, "_whole_plan", lambda *a: binds.append(1) or original(*a))
    with torch.inference_mode():
        _decode(model, 1)
        assert len(binds) == 1, "one binding for the prompt and every step"
        before = _decode(model, 1)
        model.model.layers[1].self_attn.o_proj.weight.mul_(2)          # in place: the same binding reads it
        doubled = _decode(model, 1)
    assert len(binds) == 1 and not torch.equal(before[-1], doubled[-1])
    with torch.enable_grad():
        assert all(torch.equal(a, b) for a, b in zip(_decode(model, 1), doubled))
    o_proj = model.model.layers[0].self_attn.o_proj
    o_proj.weight = torch.nn.Parameter(o_proj.weight * 1.5, requires_grad=False)   # a registration
    with torch.inference_mode():
        _decode(model, 1)
    assert len(binds) == 1, "a registration alone is not watched: torch's global hooks are left alone"
    model.weights_changed()
    with torch.inference_mode():
        replaced = _decode(model, 1)
    assert len(binds) == 2
    with torch.enable_grad():
        assert all(torch.equal(a, b) for a, b in zip(_decode(model, 1), replaced))
    head = model.lm_head.weight
    head.data = head.data.flip(0).contiguous()
    model.weights_changed()
    with torch.inference_mode():
        flipped = _decode(model, 1)
    assert len(binds) == 3
    with torch.enable_grad():
        assert all(torch.equal(a, b) for a, b in zip(_decode(model, 1), flipped))


def test_importing_k3_registers_no_global_torch_hooks():
    """Importing the layers leaves torch's module-wide registration hooks as they were."""
    import torch.nn.modules.module as torch_module

    import k3.layers.decode_weights  # noqa: F401
    import k3.model.k3  # noqa: F401

    assert not torch_module._global_parameter_registration_hooks
    assert not torch_module._global_buffer_registration_hooks
    assert not torch_module._global_module_registration_hooks


def test_module_float_rebinds_and_runs_the_modules(tiny_checkpoint):
    """Module.float() gives each parameter new storage (`param.data = ...`) under the same objects: the
    model's `_apply` moves the generation, and fp32 matrices have no native GEMV, so the modules run."""
    model = k3.load(tiny_checkpoint)
    with torch.inference_mode():
        bf16 = _decode(model, 1)
    model.float()
    with torch.inference_mode():
        widened = _decode(model, 1)
    with torch.enable_grad():
        general = _decode(model, 1)
    assert model.decode_binding.plan is None
    for a, b, c in zip(bf16, widened, general):
        assert torch.equal(b, c)
        assert torch.allclose(a, b, rtol=1e-3, atol=1e-3)


def test_mla_steps_fall_back_to_the_modules_when_the_paged_kernel_declines(tiny_checkpoint, monkeypatch):
    import k3.layers.step_state as step_state

    model = k3.load(tiny_checkpoint)
    with torch.inference_mode():
        fast = _decode(model, 1)
    asked = []
    monkeypatch.setattr(step_state, "paged_takes", lambda *a: asked.append(1) and False)
    with torch.inference_mode():
        declined = _decode(model, 1)
    assert asked, "the native step asked, and was declined"
    assert all(torch.equal(a, b) for a, b in zip(fast, declined))


def test_module_hooks_fire_with_one_call_decode_off(tiny_checkpoint, monkeypatch):
    """`model.one_call_decode = False` runs decode layer by layer through the modules, so a hook a user
    set fires; each sublayer's step is still native, and the bits are the same."""
    model = k3.load(tiny_checkpoint)
    with torch.inference_mode():
        before = _decode(model, 1)
    fired = []
    model.model.layers[1].register_forward_pre_hook(lambda *a: fired.append(1))
    model.one_call_decode = False
    counts = _count_paths(monkeypatch)
    with torch.inference_mode():
        hooked = _decode(model, 1)
    assert len(fired) == 1 + len(STEPS) and counts["whole"] == 0 and counts["attention"]
    assert all(torch.equal(a, b) for a, b in zip(before, hooked))


def test_part_timing_splits_the_plans_wall_time(tiny_checkpoint):
    """benchmarks/decode_profile.py's in-step profile: each part is timed inside the native plan."""
    from k3.ops.native import native

    kernels = native()
    if kernels is None:
        pytest.skip("the native kernels are not built here (K3_NATIVE=0 or no compiler)")
    model = k3.load(tiny_checkpoint)
    with torch.inference_mode():
        state = model.new_state(1)
        model(IDS[:1], state)
        kernels.set_part_timing(True)
        try:
            for step in STEPS:
                model(torch.tensor(step[:1]).view(1, 1), state)
            parts = kernels.part_seconds()
        finally:
            kernels.set_part_timing(False)
    assert set(parts) == {"decode_plan", "gemv", "experts", "kda_recurrence", "mla_attention", "row_ops"}
    assert all(v > 0 for v in parts.values())
    assert sum(v for k, v in parts.items() if k != "decode_plan") <= parts["decode_plan"]
    assert kernels.set_part_timing(False) is False and kernels.part_seconds()["gemv"] == 0.0, "off zeroes the totals"


def _whole_then_op_by_op(model, monkeypatch, prompt: torch.Tensor, decode) -> tuple[dict, list, list]:
    """(path counts, decode(state) with the whole plan, decode(state) op by op), each on a fresh state
    that has read `prompt` [B, T]."""
    counts = _count_paths(monkeypatch)
    results = []
    for whole in (True, False):
        if not whole:
            _op_by_op(monkeypatch)
        with torch.inference_mode():
            state = model.new_state(prompt.shape[0])
            model(prompt, state)
            results.append(decode(state))
    return counts, *results


def test_the_whole_plan_keeps_the_rows_logits_index_asks_for(tiny_checkpoint, monkeypatch):
    from k3.layers.batch import ForwardBatch

    model = k3.load(tiny_checkpoint)

    def decode(state) -> list[torch.Tensor]:
        out = []
        for index in (torch.tensor([2, 0]), torch.tensor([1, 1, 2]), torch.zeros(0, dtype=torch.long), None):
            batch = ForwardBatch.uniform(3, 1, state.num_tokens)
            out.append(model.forward_batch(torch.tensor([5, 9, 1]), batch, state.layers, index,
                                           step_states=state.step_states(batch, torch.empty(0))))
            state.num_tokens += 1
        return out

    counts, whole, steps = _whole_then_op_by_op(model, monkeypatch, IDS, decode)
    assert counts["whole"] == 3, "the empty index runs op by op"
    for a, b in zip(whole, steps):
        assert a.shape == b.shape and torch.equal(a, b)
    assert whole[2].shape == (0, model.config.vocab_size)


@pytest.mark.parametrize("change", ["tied head", "no attn_res"])
def test_the_whole_plan_for_other_configs(tmp_path, monkeypatch, change):
    """A tied vocabulary projection, and plain pre-norm residuals (no AttnRes: a plan of its own), run as
    one call too, with the op-by-op bits."""
    import dataclasses

    from k3.config.presets import tiny
    from k3.testing.checkpoint import make_checkpoint

    edit = {"tie_word_embeddings": True} if change == "tied head" else {"attn_res_block_size": None}
    model = k3.load(make_checkpoint(tmp_path, dataclasses.replace(tiny(), **edit), seed=3))
    counts, whole, steps = _whole_then_op_by_op(
        model, monkeypatch, IDS[:2, :3], lambda state: [model(torch.tensor([[t], [t + 1]]), state) for t in (5, 8, 11)])
    assert counts["whole"] == 3
    assert all(torch.equal(a, b) for a, b in zip(whole, steps))


def test_a_kda_step_whose_rows_do_not_match_its_state_names_the_problem(tiny_checkpoint):
    """The native KDA step checks its state struct: rows a sequence brings (`positions`) against the rows
    given, and the replay tensors a verify window writes its inputs to."""
    from k3.layers.steps import step_weights
    from k3.ops.native import native

    kernels = native()
    if kernels is None:
        pytest.skip("the native kernels are not built here (K3_NATIVE=0 or no compiler)")
    model = k3.load(tiny_checkpoint)
    layer = next(i for i, t in enumerate(model.config.layer_types) if t == "kda")
    weights = step_weights(model.model.layers[layer].self_attn, kernels)
    attn, c = model.model.layers[layer].self_attn, model.config
    H, D = attn.num_heads, attn.head_dim
    pool = torch.zeros(2, H, D, D)
    tails = [torch.zeros(2, c.short_conv_kernel_size - 1, H * D) for _ in range(3)]
    index = torch.tensor([1])
    x = torch.randn(3, c.hidden_size)
    with pytest.raises(RuntimeError, match="3 rows for 1 sequences of 2 positions"):
        kernels.attention_step(x, weights, kernels.KdaState(recurrent=pool, tails=tails, index=index, positions=2))
    short = [torch.empty(1, 3, H * D)] * 3 + [torch.empty(1, 3, H, D), torch.empty(1, 2, H)]
    with pytest.raises(RuntimeError, match=rf"replay tensor 4 \(beta\) must be contiguous fp32 holding \[3, {H}\]"):
        kernels.attention_step(x, weights, kernels.KdaState(recurrent=pool, tails=tails, index=index, positions=3,
                                                            replay=short))
    assert torch.equal(pool, torch.zeros_like(pool)), "a refused step leaves the state as it was"


@pytest.mark.parametrize("preset", ["released", "tiny"])
def test_the_program_text_names_every_layer_once_with_its_own_steps(preset):
    """The docs' pseudo-code (plan.program_text) covers each layer exactly once, under the body its steps make."""
    import re

    from k3.config import presets
    from k3.model.plan import _step_text, layer_steps, program_text

    c = getattr(presets, preset)()
    text = program_text(c).splitlines()
    seen = []
    for n, line in enumerate(text):
        found = re.match(r"\s+(?:el)?if layer in \{(.*)\}:", line)
        if not found:
            continue
        layers = [i for part in found.group(1).split(", ") for i in
                  (range(int(part.split("-")[0]), int(part.split("-")[-1]) + 1))]
        body = [b.strip() for b in text[n + 1:n + 1 + len(layer_steps(c, layers[0]))]]
        assert all(body == [_step_text(s) for s in layer_steps(c, i)] for i in layers)
        seen += layers
    assert sorted(seen) == list(range(c.num_hidden_layers))
    assert text[-1].startswith("logits = ")
