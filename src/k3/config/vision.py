"""The vision path's two configs: the tower and projector (`vision_config` in config.json) and the image
preprocessing (`media_proc_cfg` in preprocessor_config.json). vision spec §1.1 and 1.2.

Stdlib only. The released checkpoint's values are the defaults; `vision_from_hf` reads the 25 keys the
release has and refuses the variants K3 does not use (other norms, MLPs, merges, projectors, biases),
as every engine that serves K3 does, naming the key.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path

from k3.config.errors import ConfigError

MEDIA_PAD_ID = 163605      # `<|media_pad|>` in the released vocabulary: media_placeholder_token_id
# The only variants K3 uses: key -> required value (vision spec §1.1).
REQUIRED = {"norm_type": "rmsnorm", "mlp_type": "mlp2", "merge_type": "sd2_tpool",
            "mm_projector_type": "patchmergerv2", "pos_emb_type": "divided_fixed",
            "activation_func": "gelu_pytorch_tanh", "projector_hidden_act": "gelu",
            "attn_bias": False, "linear_bias": False, "patch_embed_proj_bias": False}
RESAMPLE_MODES = ("bilinear", "bicubic")
TORCH_RMS_EPS = 2.0 ** -23  # torch.nn.RMSNorm(eps=None) today: float32 epsilon for every input dtype (4.6)


@dataclass(frozen=True)
class VisionConfig:
    """MoonViT-3d tower + sd2_tpool merge + patchmergerv2 projector. Widths: D (hidden), Q (qkv), F (MLP)."""
    hidden_size: int = 1024                 # vt_hidden_size, D
    num_layers: int = 27                    # vt_num_hidden_layers
    num_heads: int = 12                     # vt_num_attention_heads, A
    qkv_size: int = 1536                    # qkv_hidden_size, Q; head_dim = Q / A (not D / A)
    intermediate_size: int = 4096           # vt_intermediate_size, F
    patch_size: int = 14
    pos_emb_height: int = 64
    pos_emb_width: int = 64
    pos_emb_time: int = 4                   # frames a chunk may hold (the time table's rows)
    pos_emb_interpolation: str = "bilinear"
    merge_kernel: tuple[int, int] = (2, 2)
    text_hidden_size: int = 7168            # projector output width
    projector_eps: float = 1e-5
    norm_eps: float = TORCH_RMS_EPS         # the tower's RMSNorms (open question 12.1: override here)
    media_pad_id: int = MEDIA_PAD_ID

    def __post_init__(self) -> None:
        for key in ("hidden_size", "num_layers", "num_heads", "qkv_size", "intermediate_size", "patch_size",
                    "pos_emb_height", "pos_emb_width", "pos_emb_time"):
            if not isinstance(getattr(self, key), int) or getattr(self, key) <= 0:
                raise ConfigError(f"config key 'vision_config' {key}: must be a positive integer, got {getattr(self, key)!r}")
        if self.qkv_size % self.num_heads or self.head_dim % 4:
            raise ConfigError(f"config key 'vision_config.qkv_hidden_size': {self.qkv_size} over {self.num_heads} heads "
                              "must give a head width divisible by 4 (2-D rotary pairs)")
        if self.pos_emb_interpolation not in RESAMPLE_MODES:
            raise ConfigError(f"config key 'vision_config.pos_emb_interpolation_mode': {self.pos_emb_interpolation!r}; "
                              f"use one of {RESAMPLE_MODES}")
        if tuple(self.merge_kernel) != (2, 2):
            raise ConfigError(f"config key 'vision_config.merge_kernel_size': {list(self.merge_kernel)}; K3's "
                              "sd2_tpool merge is 2x2")

    @property
    def head_dim(self) -> int:
        return self.qkv_size // self.num_heads

    @property
    def merged_width(self) -> int:
        """Projector input per merged token: the 2x2 neighbourhood's tower rows side by side."""
        return self.merge_kernel[0] * self.merge_kernel[1] * self.hidden_size

    def replace(self, **changes) -> "VisionConfig":
        return VisionConfig(**{**{f.name: getattr(self, f.name) for f in fields(self)}, **changes})


def vision_from_hf(raw: dict, media_pad_id: int | None, text_hidden: int) -> VisionConfig | None:
    """A `vision_config` object -> VisionConfig; None for an empty one (a text-only checkpoint)."""
    if not raw:
        return None
    if not isinstance(raw, dict):
        raise ConfigError("config key 'vision_config': expected an object")
    for key, want in REQUIRED.items():
        if key in raw and raw[key] != want:
            raise ConfigError(f"config key 'vision_config.{key}': {raw[key]!r} is not K3's vision tower ({want!r}); "
                              "k3 implements the released MoonViT-3d tower and patchmergerv2 projector only")
    merge = raw.get("merge_kernel_size", [2, 2])
    c = VisionConfig(
        hidden_size=raw.get("vt_hidden_size", 1024), num_layers=raw.get("vt_num_hidden_layers", 27),
        num_heads=raw.get("vt_num_attention_heads", 12), qkv_size=raw.get("qkv_hidden_size", 1536),
        intermediate_size=raw.get("vt_intermediate_size", 4096), patch_size=raw.get("patch_size", 14),
        pos_emb_height=raw.get("init_pos_emb_height", 64), pos_emb_width=raw.get("init_pos_emb_width", 64),
        pos_emb_time=raw.get("init_pos_emb_time", 4),
        pos_emb_interpolation=raw.get("pos_emb_interpolation_mode", "bilinear"),
        merge_kernel=tuple(merge) if isinstance(merge, list) else (merge, merge),
        text_hidden_size=raw.get("text_hidden_size", text_hidden),
        projector_eps=float(raw.get("projector_ln_eps", 1e-5)),
        media_pad_id=MEDIA_PAD_ID if media_pad_id is None else media_pad_id)
    if raw.get("mm_hidden_size", c.hidden_size) != c.hidden_size:
        raise ConfigError(f"config key 'vision_config.mm_hidden_size': {raw['mm_hidden_size']} must equal "
                          f"vt_hidden_size ({c.hidden_size})")
    if c.text_hidden_size != text_hidden:
        # vLLM takes the text model's width when they differ; so does k3, saying so is not needed.
        c = c.replace(text_hidden_size=text_hidden)
    return c


def vision_to_hf(c: VisionConfig) -> dict:
    """The released `vision_config` object's 25 keys for `c`."""
    return {
        "patch_size": c.patch_size, "vt_hidden_size": c.hidden_size, "vt_num_hidden_layers": c.num_layers,
        "vt_num_attention_heads": c.num_heads, "qkv_hidden_size": c.qkv_size,
        "vt_intermediate_size": c.intermediate_size, "init_pos_emb_height": c.pos_emb_height,
        "init_pos_emb_width": c.pos_emb_width, "init_pos_emb_time": c.pos_emb_time,
        "pos_emb_interpolation_mode": c.pos_emb_interpolation, "merge_kernel_size": list(c.merge_kernel),
        "mm_hidden_size": c.hidden_size, "text_hidden_size": c.text_hidden_size,
        "projector_ln_eps": c.projector_eps, "_attn_implementation": "flash_attention_2",
        **REQUIRED,
    }


@dataclass(frozen=True)
class MediaConfig:
    """Image preprocessing (`media_proc_cfg`); the released values are the defaults (vision spec §1.2)."""
    patch_size: int = 14
    merge_kernel: int = 2
    in_patch_limit: int = 65536             # whole patches an image may hold before padding
    patch_limit_on_one_side: int = 512
    fixed_output_tokens: int | None = None
    image_mean: tuple[float, float, float] = (0.5, 0.5, 0.5)
    image_std: tuple[float, float, float] = (0.5, 0.5, 0.5)
    # Transparent pixels go onto this (transparent_bg_config.pattern): chessboard, white, black, gray;
    # None (no transparent_bg_config) drops the alpha channel instead.
    background: str | None = "chessboard"
    chessboard_square: int = 8
    white_top_left: bool = True
    white: int = 255
    gray: int = 180
    fill_after_resize: bool = True          # transparent_bg_fill_stage == "after_resize"

    def replace(self, **changes) -> "MediaConfig":
        return MediaConfig(**{**{f.name: getattr(self, f.name) for f in fields(self)}, **changes})


def media_from_hf(raw: dict) -> MediaConfig:
    """preprocessor_config.json's object (its `media_proc_cfg`, or the object itself) -> MediaConfig."""
    cfg = raw.get("media_proc_cfg", raw) if isinstance(raw, dict) else None
    if not isinstance(cfg, dict):
        raise ConfigError("preprocessor_config.json: expected an object with 'media_proc_cfg'")
    bg = cfg.get("transparent_bg_config")
    bg_defaults = {"pattern": "black", "chessboard_square_size": 16, "chessboard_square_on_top_left": True,
                   "chessboard_white_value": 255, "chessboard_gray_value": 200}   # the official dataclass's
    bg = {**bg_defaults, **bg} if isinstance(bg, dict) else None
    d = MediaConfig()
    try:
        return MediaConfig(
            patch_size=int(cfg.get("patch_size", d.patch_size)),
            merge_kernel=_scalar_kernel(cfg.get("merge_kernel_size", d.merge_kernel)),
            in_patch_limit=int(cfg.get("in_patch_limit", d.in_patch_limit)),
            patch_limit_on_one_side=int(cfg.get("patch_limit_on_one_side", d.patch_limit_on_one_side)),
            fixed_output_tokens=cfg.get("fixed_output_tokens"),
            image_mean=tuple(float(x) for x in cfg.get("image_mean", d.image_mean)),
            image_std=tuple(float(x) for x in cfg.get("image_std", d.image_std)),
            **(_background(bg) if bg is not None else {"background": None}),
            fill_after_resize=cfg.get("transparent_bg_fill_stage", "before_resize") == "after_resize")
    except (TypeError, ValueError) as e:
        raise ConfigError(f"preprocessor_config.json: a media_proc_cfg value is not a number ({e})") from None


BACKGROUNDS = ("chessboard", "white", "black", "gray")


def _background(bg: dict) -> dict:
    if bg["pattern"] not in BACKGROUNDS:
        raise ValueError(f"transparent_bg_config.pattern {bg['pattern']!r} is not one of {BACKGROUNDS}")
    return {"background": bg["pattern"], "chessboard_square": int(bg["chessboard_square_size"]),
            "white_top_left": bool(bg["chessboard_square_on_top_left"]),
            "white": int(bg["chessboard_white_value"]), "gray": int(bg["chessboard_gray_value"])}


def media_to_hf(m: MediaConfig) -> dict:
    return {"media_proc_cfg": {
        "patch_size": m.patch_size, "merge_kernel_size": m.merge_kernel, "in_patch_limit": m.in_patch_limit,
        "patch_limit_on_one_side": m.patch_limit_on_one_side, "fixed_output_tokens": m.fixed_output_tokens,
        "image_mean": list(m.image_mean), "image_std": list(m.image_std),
        "transparent_bg_config": None if m.background is None else {
            "pattern": m.background, "chessboard_square_size": m.chessboard_square,
            "chessboard_square_on_top_left": m.white_top_left, "chessboard_white_value": m.white,
            "chessboard_gray_value": m.gray},
        "transparent_bg_fill_stage": "after_resize" if m.fill_after_resize else "before_resize"}}


def load_media_config(checkpoint: str | Path) -> MediaConfig:
    """The checkpoint's preprocessor_config.json, or the released values when it has none."""
    p = Path(checkpoint) / "preprocessor_config.json"
    if not p.is_file():
        return MediaConfig()
    try:
        return media_from_hf(json.loads(p.read_text()))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
        raise ConfigError(f"{p} is not valid JSON; re-download preprocessor_config.json") from None


def _scalar_kernel(v) -> int:
    if isinstance(v, list):
        if len(set(v)) != 1:
            raise ValueError(f"merge_kernel_size {v}: k3 merges square neighbourhoods")
        v = v[0]
    return int(v)
