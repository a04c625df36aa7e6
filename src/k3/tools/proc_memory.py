"""This process's memory as Linux reports it in /proc/self/status (None elsewhere)."""

from __future__ import annotations


def status_bytes(field: str) -> int | None:
    """A kB field of /proc/self/status in bytes: VmRSS (resident now), VmHWM (the peak)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def peak_rss() -> int | None:
    return status_bytes("VmHWM")


def rss() -> int | None:
    return status_bytes("VmRSS")
