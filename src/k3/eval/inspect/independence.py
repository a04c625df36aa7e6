"""Is the judge the model it judges? By identity, not by spelling: two endpoints are one server when their hosts
resolve to the same address and their ports match (`localhost`, `127.0.0.1`, `[::1]`, this machine's own
name or addresses all being this machine), and two models are one when both report the same weights
fingerprint (`k3 serve` lists it in /v1/models), whatever they are called and wherever they are served."""

from __future__ import annotations

import ipaddress
import socket
from functools import cache
from urllib.parse import urlsplit

LOCAL = "this machine"


def problems(judge: dict, tested: dict) -> list[str]:
    """Why the judge is not independent of the model under test (empty: it is). Each: {"name", "base_url",
    "fingerprint"} (an in-process model has no base_url)."""
    found = []
    if judge.get("fingerprint") and judge["fingerprint"] == tested.get("fingerprint"):
        found.append(f"both serve the same weights (fingerprint {judge['fingerprint'][:12]}...)")
    same = same_server(judge.get("base_url"), tested.get("base_url"))
    if same:
        found.append(f"both are the server at {same}")
    return found


def same_server(a: str | None, b: str | None) -> str | None:
    """'ADDRESS:PORT' when URLs `a` and `b` reach the same server, else None."""
    if not a or not b:
        return None
    ka, kb = _key(a), _key(b)
    if ka[1] != kb[1]:
        return None
    shared = ka[0] & kb[0]
    return f"{sorted(shared)[0]}:{ka[1]}" if shared else None


def _key(url: str) -> tuple[frozenset[str], int]:
    """(the addresses `url`'s host resolves to, every local one standing for LOCAL; its port)."""
    parts = urlsplit(url if "://" in url else f"http://{url}")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    host = (parts.hostname or "").lower()
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(host, port, proto=socket.IPPROTO_TCP)}
    except OSError:
        addresses = {host}        # unresolvable: only the same spelling matches
    return frozenset(LOCAL if _is_local(a) else a for a in addresses), port


def _is_local(address: str) -> bool:
    try:
        ip = ipaddress.ip_address(address.split("%")[0])
    except ValueError:
        return False
    return ip.is_loopback or ip.is_unspecified or str(ip) in _own_addresses()


@cache
def _own_addresses() -> frozenset[str]:
    """This machine's addresses: its names resolved, and Linux's table of local IPv4 and IPv6 addresses."""
    found = set()
    for name in {socket.gethostname(), socket.getfqdn()}:
        try:
            found |= {info[4][0] for info in socket.getaddrinfo(name, None)}
        except OSError:
            pass
    try:
        lines = open("/proc/net/fib_trie", encoding="ascii", errors="replace").read().splitlines()
        found |= {lines[i - 1].split()[-1] for i, line in enumerate(lines) if line.strip() == "/32 host LOCAL"}
    except OSError:
        pass
    try:
        for line in open("/proc/net/if_inet6", encoding="ascii").read().splitlines():
            raw = line.split()[0]
            found.add(str(ipaddress.ip_address(int(raw, 16))))
    except (OSError, ValueError, IndexError):
        pass
    return frozenset(found)
