"""`k3 doctor`: can this checkpoint run here, on which k3 code paths, and how fast?

Reports the format and quantisation found, the k3 code path for each part of the model, what is
unsupported (unreadable config, foreign quantisation, tensors outside the layout), this machine's
memory, free disk and measured bandwidths, a memory plan with expected seconds per token, and what
other engines need to load the same checkpoint.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from k3.checkpoint.reader import INDEX_FILE
from k3.config import K3Config
from k3.tools.engines import engine_rows
from k3.tools.estimate import estimate
from k3.tools.machine import machine_info
from k3.tools.verify import verify_checkpoint


@dataclass
class DoctorReport:
    target: str
    format: dict = field(default_factory=dict)
    code_paths: list[dict] = field(default_factory=list)
    unsupported: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    machine: dict = field(default_factory=dict)
    plan: dict | None = None
    engines: list[dict] = field(default_factory=engine_rows)

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def diagnose(name: str, config: K3Config | None, checkpoint: Path | None, *, config_error: str | None = None,
             budget: int | None = None, measure: bool = True, int8_at_load: bool = False,
             state_bytes: int = 2 ** 30) -> DoctorReport:
    report = DoctorReport(name)
    if config_error:
        report.unsupported.append(f"config.json: {config_error}")
    if checkpoint is not None:
        _check_files(checkpoint, report)
    sample = _largest_shard(checkpoint) if checkpoint else None
    machine = machine_info(checkpoint or Path.cwd(), sample, measure=measure)
    report.machine = machine.to_dict()
    if config is not None:
        report.format = _format(config)
        report.code_paths = code_paths(config)
        if budget is not None and budget > machine.mem_available:
            report.problems.append(_over_memory(budget, machine))
        budget = budget if budget is not None else int(machine.mem_available * 0.9)
        report.plan = estimate(config, budget, machine.mem_bytes_per_s, machine.disk_read_bytes_per_s,
                               int8_at_load, state_bytes).to_dict()
    return report


def _over_memory(budget: int, machine) -> str:
    """A budget this machine cannot give: the plan below is for a machine that has it (k3 plan plans for one)."""
    gb = 1e9
    return (f"--memory-budget {budget / gb:.1f} GB is more than this machine has available ({machine.mem_available / gb:.1f} "
            f"of {machine.mem_total / gb:.1f} GB): the plan below would not run here; ask for at most "
            f"{int(machine.mem_available * 0.9 / gb)}GB, or use `k3 plan` to plan for another machine")


def _check_files(checkpoint: Path, report: DoctorReport) -> None:
    if not (checkpoint / INDEX_FILE).is_file() and not any(checkpoint.glob("*.safetensors")):
        report.problems.append("no weights (config only): run `k3 download` to fetch the shards")
        return
    verified = verify_checkpoint(checkpoint, check_scales=False)
    for p in verified.problems:
        (report.unsupported if p.kind == "unexpected-tensor" else report.problems).append(str(p))
    if not verified.ok:
        report.problems.append("run `k3 verify` for the full list; re-download the files named above")


def _largest_shard(checkpoint: Path) -> Path | None:
    shards = sorted(checkpoint.glob("*.safetensors"), key=lambda p: p.stat().st_size)
    return shards[-1] if shards else None


def _format(c: K3Config) -> dict:
    hf = (c.extra or {}).get("hf", {})
    text = hf.get("text_config", hf) if isinstance(hf, dict) else {}
    quant = (text.get("quantization_config") or hf.get("quantization_config") or {}) if isinstance(text, dict) else {}
    return {"model_type": hf.get("model_type"), "quant_method": quant.get("quant_method"),
            "quant_format": quant.get("format"), "expert_format": c.expert_format or "dense",
            "layers": c.num_hidden_layers, "experts": c.num_experts, "top_k": c.num_experts_per_token}


def code_paths(c: K3Config) -> list[dict]:
    n_kda, n_mla, n_moe = len(c.kda_layers), len(c.mla_layers), len(c.moe_layers)
    experts = ("packed MXFP4 matmul, 4.25 bits/weight kept (k3.ops.mxfp4.mxfp4_linear)" if c.expert_format == "mxfp4"
               else "dense experts (stored dtype, fp32 compute on CPU)")
    rows = [("embeddings", "row lookup from the mmap-backed table"),
            (f"KDA attention x{n_kda}", "chunked prefill (k3.ops.kda.chunk_kda), recurrent decode on a fixed state"),
            (f"MLA attention x{n_mla}", "gated MLA over a paged latent cache (k3.ops.mla)"),
            (f"dense MLP x{c.num_hidden_layers - n_moe}", "SiTU-GLU (k3.ops.activation)"),
            (f"LatentMoE x{n_moe}", "sigmoid router + bias, top-k, latent down/up projections, shared experts"),
            (f"routed experts ({c.num_experts} per layer)", experts)]
    if c.attn_res_block_size is not None:
        rows.append(("Attention Residuals", f"block depth mix every {c.attn_res_block_size} layers (k3.ops.attnres)"))
    if c.vision is not None:
        v = c.vision
        rows.append(("vision tower / projector", f"MoonViT-3d, {v.num_layers} blocks of width {v.hidden_size}, attention "
                     "per image (SDPA), 2x2 merge, patchmergerv2; resident; images via image_url parts, LLM.chat, "
                     "k3 generate --image (k3.layers.vision)"))
    else:
        rows.append(("vision tower / projector", "none in this checkpoint's config: text only"))
    return [{"part": p, "k3": k} for p, k in rows]
