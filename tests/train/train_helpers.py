"""Shared by the training tests."""

from k3.config.presets import tiny_chat

# A small trainable config over a 768-token vocabulary (512 BPE ranks + 256 specials).
CONFIG = tiny_chat(attn_res_block_size=2)
