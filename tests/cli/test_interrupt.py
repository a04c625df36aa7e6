"""Ctrl-C ends k3's commands quietly: no traceback, an exit code that says interrupted, no process left
behind. `serve` gets two (the second forces shut-down while a stream is in flight)."""

import signal
import subprocess
import sys
import time

import httpx

from k3.testing.serving import free_port

K3 = [sys.executable, "-m", "k3.cli.main"]


def _ctrl_c_as_in_a_terminal() -> None:
    """A pytest-xdist worker ignores SIGINT, and a child inherits that (Python then installs no
    KeyboardInterrupt handler): the command gets Ctrl-C as it would in a terminal."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _wait_for(predicate, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.1)
    return False


def test_generate_interrupted_exits_quietly():
    proc = subprocess.Popen(K3 + ["generate", "It was", "--max-tokens", "50000", "--ignore-eos",
                                  "--cache-memory", "64MiB"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_ctrl_c_as_in_a_terminal)
    first = proc.stdout.read(1)                      # generating
    assert first
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "Traceback" not in err and "interrupted" in err


def test_serve_forced_shutdown_mid_stream_exits_quietly():
    port = free_port()
    proc = subprocess.Popen(K3 + ["serve", "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=_ctrl_c_as_in_a_terminal)
    url = f"http://127.0.0.1:{port}"
    assert _wait_for(lambda: _up(url), 120)
    body = {"model": "default", "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 100000,
            "stream": True}
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=60) as r:
        next(r.iter_lines())                         # a stream in flight
        proc.send_signal(signal.SIGINT)
        time.sleep(0.3)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert "Traceback" not in err and "CancelledError" not in err, err[-2000:]


def _up(url: str) -> bool:
    try:
        return httpx.get(url + "/health", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False
