"""The engine's flags, generated from the settings k3.EngineConfig's fields take their defaults from
(k3.config.engine_settings: each a flag under its kebab-case name, vLLM's names, with its help), one parser
for every command that runs a model here (k3 serve, generate, chat, bench --model, eval --model, check
--model), and `engine_config(args)`, the one place those flags become an EngineConfig (validated there,
before loading). Each default lives once: a flag left out is not passed, so the field's default applies;
help shows it. Torch-free, so the parsers stay instant."""

from __future__ import annotations

import argparse
import re

from k3.cli.trunk_arg import add_trunk_argument
from k3.config.engine_settings import SETTINGS


def _shown(value, size: bool) -> str | None:
    """A default as a user would type it (sizes in binary units), or None for one the help explains."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "on" if value else "off"
    if size and isinstance(value, int):
        for unit, scale in (("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
            if value % scale == 0:
                return f"{value // scale}{unit}"
    return str(value)


def add_engine_arguments(p, *, local_only: bool = False, **defaults) -> None:
    """The flags, in a group of their own; `defaults`: the command's own defaults for some fields (k3 chat
    decodes one sequence); `local_only`: the command also drives remote endpoints, where they do not apply
    (the group's title says so)."""
    g = p.add_argument_group("engine (k3.EngineConfig" + ("; with --model, a model run here)" if local_only else ")"))
    for name, s in SETTINGS.items():
        kwargs = {"default": defaults.get(name), "help": s.help}
        shown = _shown(defaults.get(name, s.default), s.metavar == "SIZE")
        if shown is not None:
            kwargs["help"] += f" (default: {shown})"
        if isinstance(s.default, bool):
            kwargs["action"] = argparse.BooleanOptionalAction
        else:
            kwargs.update(metavar=s.metavar, choices=s.choices, type=int if s.is_int else None)
        g.add_argument("--" + name.replace("_", "-"), **kwargs)
    add_trunk_argument(g)


def engine_config(args, **fixed):
    """The EngineConfig the flags describe (ValueError naming the field where one is wrong); `fixed`: settings
    the command decides itself."""
    from k3.engine.config import EngineConfig

    settings = {name: getattr(args, name) for name in SETTINGS if getattr(args, name) is not None}
    if args.trunk is not None:
        settings["trunk"] = args.trunk
    if hasattr(args, "max_image_bytes"):   # k3 serve's image limits (cli/vision_args.py)
        from k3.cli.vision_args import image_limits

        settings["image_limits"] = image_limits(args)
    try:
        return EngineConfig(**{**settings, **fixed})
    except ValueError as e:
        raise ValueError(_as_flags(str(e), [*SETTINGS, "trunk"])) from None


def _as_flags(message: str, names: list[str]) -> str:
    """EngineConfig's message in the flags' names (max_num_seqs -> --max-num-seqs): what the user typed."""
    for name in sorted(names, key=len, reverse=True):
        if "_" in name and name != "image_limits":
            message = re.sub(rf"(?<![-\w]){name}\b", "--" + name.replace("_", "-"), message)
        elif message.startswith(name):
            message = "--" + message
    return message
