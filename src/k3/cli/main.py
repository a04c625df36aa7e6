"""`k3 <command>`: argument parsing only; each command calls one library function, imported lazily."""

from __future__ import annotations

import argparse
import sys

COMMANDS = {
    "inspect": ("k3.cli.inspect", "sizes and schedule of a checkpoint, a config.json, or a preset"),
    "synth": ("k3.cli.synth", "write a random checkpoint in the official K3 layout"),
    "generate": ("k3.cli.generate", "stream a continuation of a prompt (text or token ids)"),
    "chat": ("k3.cli.chat", "a conversation in the terminal, streamed (as `ollama run` / `llama-cli -cnv`)"),
    "chat-template": ("k3.cli.chat_template", "render chat messages as K3 XTML segments (and token ids)"),
    "prepare-data": ("k3.cli.prepare_data", "train a tokenizer and tokenize text files for `k3 train`"),
    "train": ("k3.cli.train", "train a K3-architecture model; exports the official layout"),
    "serve": ("k3.cli.serve", "OpenAI-compatible HTTP server (chat, completions, tokenize)"),
    "models": ("k3.cli.models", "the models on this machine: bundled, downloaded, in the hub cache; size, complete?"),
    "download": ("k3.cli.download", "fetch a checkpoint from HTTP(S) mirrors: parallel, resumable, verified"),
    "verify": ("k3.cli.verify", "check a checkpoint is complete, intact and matches its config"),
    "doctor": ("k3.cli.doctor", "can this machine and k3 (or another engine) run this checkpoint?"),
    "plan": ("k3.cli.plan", "memory plan under a budget: what stays resident, what streams, s/token"),
    "quantize": ("k3.cli.quantize", "convert BF16/FP32 routed experts to official MXFP4"),
    "bench": ("k3.cli.bench", "latency/throughput of the local engine or any OpenAI endpoint"),
    "eval": ("k3.cli.eval", "quality, refusal, agent and code evaluation of a local model or any OpenAI endpoint"),
    "check": ("k3.cli.check", "quality, speed and memory in one run, decided on intervals: PASS, FAIL or INCONCLUSIVE"),
    "demo": ("k3.cli.demo", "generate with the bundled model, then write a small random checkpoint and run it "
                            "end to end (inspect, forward pass, batched generation, a chat turn)"),
}


class DefaultsFormatter(argparse.HelpFormatter):
    """--help shows each option's default, except where the help text already says it or there is none."""

    def _get_help_string(self, action):
        text = action.help or ""
        shown = action.default not in (None, False, argparse.SUPPRESS) and action.option_strings
        return text + " (default: %(default)s)" if shown and "default" not in text else text


def build_parser() -> argparse.ArgumentParser:
    import importlib
    import platform

    from k3 import __version__

    parser = argparse.ArgumentParser(prog="k3", description="Run, check and measure Kimi K3. Models are named the "
                                     "same everywhere: a checkpoint directory, `default` (the bundled model), a "
                                     "downloaded repo id (moonshotai/Kimi-K3), or a preset where only a "
                                     "configuration is needed.")
    parser.add_argument("--version", action="version",
                        version=f"k3 {__version__} (Python {platform.python_version()})")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text, formatter_class=DefaultsFormatter)
        importlib.import_module(module).add_arguments(p)
        for action in p._actions:   # argparse prints no line for an option without help, hence no default
            if action.help is None and action.option_strings and action.default not in (None, False):
                action.help = "default: %(default)s"
        p.set_defaults(module=module)
    return parser


# Modules that come with an extra, and the extra to install for them.
EXTRAS = {"fastapi": "serve", "uvicorn": "serve", "prometheus_client": "serve", "starlette": "serve",
          "matplotlib": "bench", "tokenizers": "train", "mlx": "oracle", "mlx_lm": "oracle", "rdata": "corpus"}


def missing_extra(error: ModuleNotFoundError) -> str | None:
    """The one-line fix for a module that an extra provides, else None."""
    root = (error.name or "").split(".")[0]
    extra = EXTRAS.get(root)
    if extra is None:
        return None
    checkout = _checkout()
    if checkout is None:
        return f"needs the [{extra}] extra ({root} is not installed): pip install 'k3[{extra}]'"
    return (f"needs the [{extra}] extra ({root} is not installed); in this clone: cd {checkout} && "
            f"{sys.executable} -m pip install -e '.[{extra}]' torch==2.13.0")


def _checkout():
    """The clone k3 runs from (an editable install: src/k3 inside a folder with k3's pyproject.toml), else None."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    try:
        return root if 'name = "k3"' in (root / "pyproject.toml").read_text() else None
    except OSError:
        return None


def main(argv: list[str] | None = None) -> int:
    import importlib

    args = build_parser().parse_args(argv)   # before anything heavy: --help and --version stay instant
    from k3.checkpoint.errors import CheckpointError
    from k3.config.model import ConfigError

    try:
        return importlib.import_module(args.module).run(args) or 0
    except KeyboardInterrupt:   # Ctrl-C: the user asked to stop; no traceback
        print(f"\nk3 {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:   # `k3 ... | head`: the reader left; say nothing more
        _silence_stdout()
        return 1
    except ModuleNotFoundError as e:
        fix = missing_extra(e)
        if fix is None:
            raise
        print(f"k3 {args.command}: {fix}", file=sys.stderr)
        return 2
    except (CheckpointError, ConfigError, OSError, ValueError) as e:  # OSError: missing files, full disk, ...
        print(f"k3 {args.command}: error: {e}", file=sys.stderr)
        return 2


def _silence_stdout() -> None:
    """Python would report the broken pipe again when it flushes stdout at exit."""
    import os

    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def entry() -> None:
    """The `k3` console script: main(), then an exit that cannot hang. A second Ctrl-C ends the process at
    once (the server installs its own, which does the same). If the interpreter's own shutdown (joining
    threads, flushing) has not ended the process 10 s after the command finished, a thread that never ends
    is holding it: say so and exit, so a finished or interrupted command never lingers."""
    import os
    import signal
    import threading
    import time

    def interrupted(signum, frame):   # the first Ctrl-C stops the command; a second ends the process now
        signal.signal(signal.SIGINT, lambda *_: os._exit(130))
        raise KeyboardInterrupt

    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:   # not where Ctrl-C is meant to be ignored
        signal.signal(signal.SIGINT, interrupted)
    code = main()

    def overdue() -> None:
        time.sleep(10)
        print("k3: exiting although a thread did not finish within 10 s of the end", file=sys.stderr, flush=True)
        os._exit(code)

    threading.Thread(target=overdue, daemon=True).start()
    sys.exit(code)


if __name__ == "__main__":
    entry()
