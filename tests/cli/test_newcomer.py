"""What a newcomer meets first, each trap a test: the bundled model answers visibly with thinking off by
default, CLI conventions (--version, defaults in --help, stdin prompts, sampling flags), fast --help, honest
messages (GGUF, --no-measure, doctor = plan, max_model_len), the tools that talk to servers asking them."""

import json
import subprocess
import sys
import time

import openai
import pytest

from k3.cli.main import main
from k3.defaults import default_model
from k3.engine import LLM, SamplingParams
from k3.testing.serving import serving


@pytest.fixture(scope="module")
def bundled():
    return LLM(str(default_model()), cache_memory="64MiB")


def test_the_readme_client_snippet_gets_visible_text_from_the_bundled_model(bundled):
    with serving(bundled, "default") as url:
        client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0)
        r = client.chat.completions.create(model="default", messages=[{"role": "user", "content": "Hello"}],
                                           max_tokens=16)
        assert r.choices[0].message.content.strip()
        fmt = {"type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "object", "properties": {
            "name": {"type": "string", "maxLength": 8}}, "required": ["name"], "additionalProperties": False}}}
        r = client.chat.completions.create(model="default", messages=[{"role": "user", "content": "Name?"}],
                                           max_tokens=40, response_format=fmt)
        assert set(json.loads(r.choices[0].message.content)) == {"name"}   # the constraint applied to content
        thought = client.chat.completions.create(model="default", messages=[{"role": "user", "content": "Hi"}],
                                                 max_tokens=8, extra_body={"chat_template_kwargs": {"thinking": True}})
        assert thought.choices[0].message.content in ("", None)   # asked for: the think channel, never closed
        assert client.models.retrieve("default").id == "default"
        import httpx
        assert httpx.get(url + "/version").json()["version"] == __import__("k3").__version__


def test_llm_chat_follows_the_models_thinking_default(bundled):
    out = bundled.chat([{"role": "user", "content": "Hello"}], SamplingParams(max_tokens=8, temperature=0.0))[0]
    assert out.message.content.strip() and not out.message.reasoning_content
    on = bundled.chat([{"role": "user", "content": "Hello"}], SamplingParams(max_tokens=8), thinking=True)[0]
    assert on.message.reasoning_content and not on.message.content


def test_version_and_help_show_defaults_without_importing_torch():
    code = ("import sys; from k3.cli.main import main\ntry: main(['generate', '--help'])\nexcept SystemExit: pass\n"
            "print('TORCH' if 'torch' in sys.modules else 'NO-TORCH')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60).stdout
    flat = " ".join(out.split())                     # argparse wraps lines
    assert flat.endswith("NO-TORCH") and "--max-tokens MAX_TOKENS default: 32" in flat and "--min-p" in flat
    version = subprocess.run([sys.executable, "-m", "k3.cli.main", "--version"], capture_output=True, text=True)
    assert version.stdout.startswith("k3 0.")


def test_generate_reads_stdin_and_takes_sampling_flags(monkeypatch, capsys):
    import io

    monkeypatch.setattr(sys, "stdin", io.StringIO("It was a truth"))
    assert main(["generate", "-", "--max-tokens", "6", "--min-p", "0.1", "--repetition-penalty", "1.2",
                 "--temperature", "0.8", "--seed", "1", "--stop", "zzzz", "--threads", "1",
                 "--cache-memory", "16MiB"]) == 0
    out = capsys.readouterr()
    assert out.out.strip() and "prompt 4 tokens" in out.err


def test_terminal_chat_with_piped_turns(monkeypatch, capsys):
    import io

    monkeypatch.setattr(sys, "stdin", io.StringIO("It was a dark night\n/reset\nAnd then?\n"))
    assert main(["chat", "--max-tokens", "6", "--seed", "0", "--cache-memory", "16MiB"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert len(lines) == 2      # one reply per turn; /reset is a command, not a turn


def test_a_gguf_file_is_named_for_what_it_is(tmp_path, capsys):
    (tmp_path / "model.gguf").write_bytes(b"GGUF\x03\x00\x00\x00" + b"\x00" * 64)
    assert main(["inspect", str(tmp_path / "model.gguf")]) == 2
    err = capsys.readouterr().err
    assert "GGUF" in err and "safetensors" in err and "not valid JSON" not in err


def test_doctor_shows_the_plan_that_plan_shows_and_says_when_it_did_not_measure(capsys, monkeypatch):
    from k3.tools import machine

    monkeypatch.setattr(machine, "memory", lambda: (2 ** 40, 2 ** 40))   # room for the budgets planned here
    assert main(["doctor", "k3", "--memory-budget", "100GB", "--no-measure", "--json"]) == 0
    doctor = json.loads(capsys.readouterr().out)["plan"]
    assert main(["plan", "k3", "--memory-budget", "100GB", "--disk-bandwidth", "3GB", "--memory-bandwidth",
                 "40GB", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert doctor["expert_cache_bytes"] == plan["expert_cache_bytes"] and doctor["mode"] == plan["mode"]
    assert main(["doctor", "k3", "--memory-budget", "8GB", "--no-measure"]) == 0
    text = capsys.readouterr().out
    assert "refused" in text and "0.00 GB/s" not in text and "not measured" in text


def test_max_model_len_errors_name_the_limit_that_binds(bundled):
    from k3.engine.admission import max_model_len

    capacity, config = bundled.engine.capacity, bundled.model.config
    with pytest.raises(ValueError, match="raise cache_memory .*--cache-memory.* to at least"):
        max_model_len(capacity.max_cached_tokens + 1, capacity, config)
    big = config.replace(max_position_embeddings=64)
    with pytest.raises(ValueError, match="past the model's max_position_embeddings"):
        max_model_len(65, capacity, big)


def test_bench_asks_the_server_its_vocabulary_and_prints_a_table(bundled, capsys):
    with serving(bundled, "default") as url:
        assert main(["bench", "--endpoint", url, "--api", "completions", "--num-prompts", "3", "--input-len", "8",
                     "--output-len", "4"]) == 0
    out = capsys.readouterr().out
    assert "{" not in out                                  # a table, not a JSON line, unless --json
    assert main(["bench", "--endpoint", url.replace(url.rsplit(":", 1)[1], "1"), "--json"]) == 2


def test_bench_plot_without_matplotlib_fails_before_the_run(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    start = time.perf_counter()
    assert main(["bench", "--model", str(default_model()), "--plot", "x.png"]) == 2
    assert "install -e '.[bench]'" in capsys.readouterr().err and time.perf_counter() - start < 5


def test_eval_max_tokens_fits_the_served_context():
    from k3.cli.eval import _max_tokens

    assert _max_tokens(None, 2048) == 1024 and _max_tokens(None, None) == 32768 and _max_tokens(100, 2048) == 100


def test_synth_tiny_chat_writes_a_tokenizer_so_it_can_be_served(tmp_path, capsys):
    assert main(["synth", str(tmp_path / "c"), "--preset", "tiny-chat"]) == 0
    assert (tmp_path / "c" / "tiktoken.model").is_file() and "test tokenizer" in capsys.readouterr().out


def test_bench_exits_non_zero_when_every_request_failed(capsys):
    """Issue 69: a run whose every request failed printed its table and exited 0, so a script took it for a
    result. Here nothing listens at the endpoint."""
    from k3.testing.serving import free_port

    rc = main(["bench", "--endpoint", f"http://127.0.0.1:{free_port()}", "--api", "chat", "--served-model-name", "m",
               "--num-prompts", "3", "--input-len", "8", "--output-len", "4", "--warmup", "0", "--timeout", "10"])
    err = capsys.readouterr().err
    assert rc == 1 and "every request failed (3 x" in err


def test_progress_lines_say_the_share_done():
    from k3.tools.progress import ProgressLines
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stderr(buf):
        lines = ProgressLines("requests", 4)
        lines.advance()
    assert buf.getvalue().strip() == "requests: 25 % (1/4)"
