"""k3's measuring tools against a server nobody here wrote: llama.cpp's `llama-server` (issue 65).

The bundled model (a small K3-architecture checkpoint) goes through llama.cpp's own converter into a GGUF,
`llama-server` (built from the llama.cpp that `llama-cpp-python`'s sdist vendors) serves it, and k3's
commands run against it as a user would run them against any OpenAI-compatible endpoint: `k3 bench`,
`k3 eval` (refusal, thinking asked for, a constraint sweep that must count tokens, a judge at the same
address under another spelling) and `k3 check`. For each: whether it ran, its headline figure, and what
the server lacks that k3 then says or does without.

    .venv/bin/python benchmarks/foreign_server.py [--port 8420]

Builds llama.cpp with its server once (about 8 minutes on 2 cores; python -m k3.testing.llama_cpp build
--server). Prints a table, then one JSON line (date, commit, command).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx
from servers import wait_up

K3 = str(Path(sys.executable).with_name("k3"))
LIMIT, TOKENS = "8", "24"


CONTEXT = 8192


def with_context(model: Path, out: Path) -> Path:
    """The checkpoint with the context length llama.cpp's converter looks for (`max_position_embeddings`: the
    bundled model's config has none, k3 takes its length from its memory plan); the files linked, not copied."""
    out.mkdir()
    for f in model.iterdir():
        (out / f.name).symlink_to(f.resolve())
    config = json.loads((model / "config.json").read_text())
    (config.get("text_config") or config)["max_position_embeddings"] = CONTEXT
    (out / "config.json").unlink()
    (out / "config.json").write_text(json.dumps(config))
    return out


def start(gguf: Path, port: int) -> tuple[subprocess.Popen, str]:
    from k3.testing.llama_cpp.build import SERVER, bin_dir

    proc = subprocess.Popen([str(bin_dir() / SERVER), "-m", str(gguf), "--port", str(port), "--host", "127.0.0.1",
                             "-c", str(CONTEXT), "-np", "2", "--jinja", "-a", "k3-default"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return proc, wait_up(proc, f"http://127.0.0.1:{port}", "llama-server")


def k3(*argv: str) -> tuple[int, str, str]:
    r = subprocess.run([K3, *argv], capture_output=True, text=True)
    return r.returncode, r.stdout, r.stderr


def last_json(text: str) -> dict:
    lines = [line for line in text.strip().splitlines() if line.startswith("{")]
    return json.loads(lines[-1]) if lines else {}


def runs(url: str, tmp: Path) -> list[dict]:
    """Each command against the server: {what, command, exit, ran, figure, lacks}."""
    out = []

    def row(what, argv, figure):
        code, stdout, stderr = k3(*argv)
        found = last_json(stdout)
        try:
            shown = figure(found, stdout, stderr)
        except (KeyError, TypeError, ValueError, IndexError) as e:
            shown = f"(no figure: {type(e).__name__})"
        shown_argv = [a.replace(str(tmp), "DIR").replace(url, "URL").replace(url.replace("127.0.0.1", "localhost"),
                                                                               "URL-spelt-localhost") for a in argv]
        out.append({"what": what, "command": "k3 " + " ".join(shown_argv),
                    "exit": code, "figure": shown, "stderr": (stderr.strip().splitlines() or [""])[-1][:300]})

    row("k3 bench", ["bench", "--endpoint", url, "--num-prompts", "8", "--input-len", "64", "--output-len", TOKENS,
                     "--concurrency", "2", "--json"],
        lambda r, *_: f"{r.get('output_throughput', 0):.1f} tok/s out, TTFT p50 {(r.get('ttft_ms') or {}).get('p50', 0):.0f} ms")
    row("k3 eval refusal", ["eval", "refusal", "--endpoint", url, "--limit", LIMIT, "--max-tokens", TOKENS,
                            "--no-progress", "--log-dir", str(tmp / "refusal")],
        lambda r, *_: _metrics(r, "refusal.over_refusal", "refusal.cut"))
    row("k3 eval refusal --thinking", ["eval", "refusal", "--endpoint", url, "--limit", "2", "--max-tokens", TOKENS,
                                       "--thinking", "--no-progress", "--log-dir", str(tmp / "thinking")],
        lambda r, *_: _metrics(r, "refusal.cut", "refusal.empty"))
    row("k3 eval constraints", ["eval", "constraints", "--endpoint", url, "-T", "lengths=1024", "-T", "per_length=2",
                                "--max-tokens", TOKENS, "--no-progress", "--log-dir", str(tmp / "constraints")],
        lambda r, *_: _counted(r) + "; " + _metrics(r, "constraints.pass@1"))
    row("k3 eval refusal --judge (same server, other spelling)",
        ["eval", "refusal", "--endpoint", url, "--judge", url.replace("127.0.0.1", "localhost"), "--judge-model",
         "k3-default", "--limit", "2", "--max-tokens", TOKENS, "--no-progress", "--log-dir", str(tmp / "judge")],
        lambda r, out, err: (err.strip().splitlines() or [""])[-1][:160])
    row("k3 check", ["check", "refusal", "--endpoint", url, "--limit", LIMIT, "--max-tokens", TOKENS, "--json",
                     "--log-dir", str(tmp / "check"), "--require", "ttft.p50<=2s", "tpot.p50<=200ms",
                     "refusal.over_refusal<=0.5"],
        lambda r, *_: f"{r['verdict']}: " + ", ".join(f"{q['requirement']} {q['status']}" for q in r["requirements"])
        + f"; server named {r['provenance']['server']['server']!r}")
    return out


def _metrics(summary: dict, *names: str) -> str:
    metrics = {k: v for t in summary.get("tasks", []) for k, v in t.get("metrics", {}).items()}
    shown = []
    for name in names:
        m = metrics.get(name) or {}
        shown.append(f"{name} {m.get('value'):.2f} (n = {m.get('n')})" if m.get("value") is not None
                     else f"{name} n/a (n = {m.get('n', 0)})")
    return ", ".join(shown)


def _counted(summary: dict) -> str:
    from inspect_ai.log import read_eval_log

    logs = [t["log"] for t in summary.get("tasks", [])]
    if not logs:
        return "no log"
    counted = {s.metadata.get("counted_by") for s in read_eval_log(logs[0]).samples or []}
    return "counted by " + ", ".join(sorted(str(c) for c in counted))


# What k3 reads from a server, and what it does where the server does not give it.
WITHOUT = {"fingerprint_in_models": "a judge's independence is decided by address alone",
           "max_model_len_in_models": "the answer budget and the constraint sweep's lengths take k3's defaults",
           "version_endpoint": "reports name the server 'unknown' and record this client's machine apart",
           "tokenize_vllm_form": "the constraint sweep sizes its filler by an estimate of 4 characters a token"}


def lacks(url: str) -> dict:
    """What the server reports of the things k3 reads (and `k3 serve` gives)."""
    models = httpx.get(url + "/v1/models", timeout=10).json().get("data", [{}])[0]
    version = httpx.get(url + "/version", timeout=10)
    tokenize = httpx.post(url + "/tokenize", json={"model": "k3-default", "prompt": "hello"}, timeout=10)
    return {"fingerprint_in_models": "fingerprint" in models, "max_model_len_in_models": "max_model_len" in models,
            "version_endpoint": version.status_code == 200 and "server" in (version.json() if version.headers.get(
                "content-type", "").startswith("application/json") else {}),
            "tokenize_vllm_form": tokenize.status_code == 200 and "count" in tokenize.json()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=8420)
    args = ap.parse_args()
    from k3.defaults import default_model
    from k3.testing.llama_cpp import build, convert

    build(server=True, log=lambda s: print(s, file=sys.stderr, flush=True))
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        gguf = convert(with_context(Path(default_model()), tmp / "model"), tmp / "default-bf16.gguf", "bf16")
        server, url = start(gguf, args.port)
        try:
            found, missing = runs(url, tmp), lacks(url)
        finally:
            server.terminate()
            server.wait(timeout=30)
    print(f"{'what':<58}{'exit':>5}  result")
    for r in found:
        print(f"{r['what']:<58}{r['exit']:>5}  {r['figure']}")
    print("\nwhat k3 reads                 llama-server gives it   where not, k3")
    for key, has in missing.items():
        print(f"{key:<30}{'yes' if has else 'no':<24}{'' if has else WITHOUT[key]}")
    from k3.eval.inspect.provenance import provenance
    from k3.testing.llama_cpp.build import VERSION

    p = provenance(None)
    print(json.dumps({"bench": "foreign_server", "date": p["date"], "commit": p["k3_commit"], "cpu": p["hardware"]["cpu"],
                      "command": " ".join(["benchmarks/foreign_server.py", *sys.argv[1:]]),
                      "server": f"llama-server (llama-cpp-python {VERSION}'s llama.cpp)", "runs": found,
                      "server_reports": missing, "without": {k: WITHOUT[k] for k, v in missing.items() if not v}}))


if __name__ == "__main__":
    main()
