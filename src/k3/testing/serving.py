"""Tests reach the loopback server through here (k3.serve.loopback holds it)."""

from k3.serve.loopback import free_port, serving, start_server

__all__ = ["free_port", "serving", "start_server"]
