"""Where a result came from, recorded in every log k3 writes (Inspect's eval metadata, key "k3"): the date,
k3's version and commit, the machine the model ran on, the fingerprint of the weights evaluated, and the
judge with whether it is independent of the model, so two reports can be compared knowing what was run
where. For an endpoint, the machine is the server's as its server reports it (`k3 serve` at /version;
"unknown" for a server that does not say), and this client's is recorded apart, as the client's."""

from __future__ import annotations

import datetime

import httpx

import k3
from k3.config import identity
from k3.eval.inspect import independence
from k3.tools.machine import torch_facts

UNKNOWN = {"server": "unknown", "hardware": "unknown (the server does not report it)"}


def provenance(model_fingerprint: str | None, server: dict | None = None) -> dict:
    """server: the endpoint's identity (server_identity); None for a model run in this process."""
    here = identity.hardware() | torch_facts()
    out = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "k3_version": k3.__version__, "k3_commit": identity.commit(), "model_fingerprint": model_fingerprint}
    if server is None:
        return out | {"hardware": here, "server": {"server": "this process (in-process model)"}}
    return out | {"hardware": server.get("hardware", UNKNOWN["hardware"]), "server": server, "client": here}


def server_identity(base_url: str, api_key: str | None = None, timeout: float = 30.0) -> dict:
    """What the server at `base_url` (its OpenAI root) says it is: k3's /version names the server, its version,
    commit and machine; any other server is "unknown" (with the version it reports, if any)."""
    root = base_url.rstrip("/").removesuffix("/v1")
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        r = httpx.get(root + "/version", headers=headers, timeout=timeout)
        body = r.json() if r.status_code == 200 else {}
    except (httpx.HTTPError, ValueError):
        body = {}
    if not isinstance(body, dict):
        body = {}
    if body.get("server") == "k3" and isinstance(body.get("hardware"), dict):
        return {k: body.get(k) for k in ("server", "version", "commit", "hardware")}
    return UNKNOWN | ({"reported_version": str(body["version"])[:80]} if "version" in body else {})


def served_model(base_url: str, model: str | None, api_key: str | None = None, timeout: float = 30.0) -> dict:
    """What an endpoint's /v1/models lists for `model` ({} when it lists nothing): `k3 serve` gives the weights'
    "fingerprint" and "max_model_len", vLLM the latter."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        r = httpx.get(base_url.rstrip("/") + "/models", headers=headers, timeout=timeout)
        r.raise_for_status()
        rows = r.json().get("data", [])
    except (httpx.HTTPError, ValueError, AttributeError):
        return {}
    return next((row for row in rows if isinstance(row, dict) and (model is None or row.get("id") == model)), {})


def check_judge(judge: dict, tested: dict, allow_dependent: bool = False) -> dict:
    """The judge's record for the provenance: {name, base_url, fingerprint, independent, why}. A judge that is
    the model under test (independence.problems) is refused, unless `allow_dependent`, which records it."""
    why = independence.problems(judge, tested)
    if why and not allow_dependent:
        raise ValueError(f"the judge is not independent of the model under test: {'; '.join(why)}. Use another "
                         "model as judge, or pass --allow-dependent-judge to run anyway with every report and "
                         "verdict marked 'judge not independent'")
    return {**judge, "independent": not why, "why": why}
