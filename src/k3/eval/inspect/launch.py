"""What `k3 eval` does, over Inspect AI's eval(): the model (in-process `k3/PATH`, or any OpenAI-compatible
endpoint through Inspect's `openai-api` provider), k3's tasks by short name (or any Inspect task spec),
the judge as Inspect's "grader" role, provenance in every log, and k3's report derived from the logs."""

from __future__ import annotations

import inspect as pyinspect
from dataclasses import dataclass, field
from pathlib import Path

from inspect_ai import eval as inspect_eval
from inspect_ai.model import GenerateConfig, Model, get_model

from k3.eval.inspect import provenance as prov
from k3.eval.inspect import report as reports

# Short names -> k3's Inspect tasks (registry names); anything else goes to Inspect as it is given.
TASKS = {"challenge": "k3/challenge", "refusal": "k3/refusal", "humaneval": "k3/humaneval", "code": "k3/code",
         "constraints": "k3/constraints", "bfcl": "k3/bfcl", "harmful": "k3/harmful", "grading": "k3/grading"}
LIKELIHOOD = ("mc", "gen", "perplexity")
SANDBOXED = ("challenge", "code", "humaneval")     # run model-written code: bubblewrap is checked before any item


@dataclass
class Target:
    """The model under test (or the judge): how Inspect reaches it and what identifies its weights."""
    model: Model
    name: str
    base_url: str | None = None
    fingerprint: str | None = None
    context: int | None = None          # prompt + answer tokens a request may hold
    server: dict | None = None          # an endpoint's server as it names itself (provenance.server_identity)

    def identity(self) -> dict:
        return {"name": self.name, "base_url": self.base_url, "fingerprint": self.fingerprint}


@dataclass
class Run:
    tasks: list[str]
    target: Target
    judge: Target | None = None
    task_args: dict = field(default_factory=dict)
    limit: int | None = None
    epochs: int = 1
    approval: str | None = None
    log_dir: str = "logs"
    config: GenerateConfig = field(default_factory=GenerateConfig)
    progress: bool = True
    prices: dict = field(default_factory=dict)
    dependent_judge: bool = False       # run with a judge that is not independent of the model, and say so


def local(path: str, config=None, thinking: bool | None = None) -> Target:
    """A model served in this process by Inspect's "k3" provider; config: its k3.EngineConfig (passed as its
    settings, the JSON Inspect records with the model's arguments)."""
    settings = config.settings() if config is not None else {}
    model = get_model(f"k3/{path}", memoize=False, thinking=thinking, **settings)
    engine = model.api.llm.engine
    fingerprint = model.api.thread.call(lambda: engine.fingerprint)   # tensor reads stay on the model's thread
    return Target(model, f"k3/{path}", None, fingerprint, engine.max_model_len)


def scripted(name: str, challenge: str | None = None) -> Target:
    """A scripted challenge agent (scripted_agents.py) in place of a model."""
    import k3.eval.inspect.registry  # noqa: F401  (registers the k3agent provider)

    model = get_model(f"k3agent/{name}", memoize=False, challenge=challenge)
    return Target(model, f"k3agent/{name}")


def endpoint(base_url: str, name: str | None, api_key: str | None = None, thinking: bool | None = None) -> Target:
    """`base_url`: the server's OpenAI root, with or without its /v1 (http://host:8000 and .../v1 both work).
    `thinking`: asked of the server on every call as chat_template_kwargs (K3's `thinking`, and the
    `enable_thinking` other templates read); None leaves the server's default."""
    base_url = openai_root(base_url)
    name = name or first_model(base_url, api_key)
    kwargs = {} if thinking is None else {"config": GenerateConfig(extra_body={
        "chat_template_kwargs": {"thinking": thinking, "enable_thinking": thinking}})}
    model = get_model(f"openai-api/k3/{name}", base_url=base_url, api_key=api_key or "none", memoize=False, **kwargs)
    listed = prov.served_model(base_url, name, api_key)
    return Target(model, name, base_url, listed.get("fingerprint"), listed.get("max_model_len"),
                  server=prov.server_identity(base_url, api_key))


def openai_root(url: str) -> str:
    """A server's URL as its OpenAI root: http://host:8000 and http://host:8000/v1/ are both http://host:8000/v1."""
    root = url.rstrip("/")
    return root if root.endswith("/v1") else root + "/v1"


def judge(base_url: str, name: str | None, api_key: str | None = None) -> Target:
    """The judge model at an endpoint, reached once before anything runs: one that cannot be reached is refused
    now, naming the address, rather than failing every grading later."""
    import httpx

    root = openai_root(base_url)
    try:
        r = httpx.get(root + "/models", timeout=30, headers={"Authorization": f"Bearer {api_key}"} if api_key else {})
        r.raise_for_status()
    except httpx.HTTPError as e:
        raise ValueError(f"the judge at {root} cannot be reached ({type(e).__name__}: {e}); check --judge and that "
                         "its server is up") from None
    return endpoint(base_url, name, api_key)


def first_model(base_url: str, api_key: str | None) -> str:
    import httpx

    try:
        r = httpx.get(base_url.rstrip("/") + "/models", timeout=30,
                      headers={"Authorization": f"Bearer {api_key}"} if api_key else {})
        return r.json()["data"][0]["id"]
    except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as e:
        raise ValueError(f"{base_url}/models did not list a model ({e}); pass --served-model-name") from None


def precheck(tasks: list[str], task_args: dict) -> None:
    """What can be refused before a model is loaded or reached: unknown task kinds, a -T argument no task
    takes, a task that runs model-written code on a machine without the sandbox."""
    takes: list[set[str] | None] = []
    for spec in tasks:
        name = spec.partition(":")[0]
        if name in LIKELIHOOD:
            raise ValueError(f"{spec}: log-likelihood sets run on lm-evaluation-harness against `k3 serve` (see the "
                             "evaluation guide, 'Log-likelihood sets'): lm_eval --model local-completions ...")
        if name in SANDBOXED:
            from k3.eval.sandbox import namespaces

            try:
                namespaces.require()
            except namespaces.SandboxUnavailable as e:
                raise ValueError(f"{name} runs model-written code in k3's sandbox: {e}") from None
        takes.append(set(pyinspect.signature(_task_fn(name)).parameters) if name in TASKS else None)
    if all(t is not None for t in takes):
        unused = sorted(set(task_args) - set().union(*takes))
        if unused:
            raise ValueError(f"no task given takes the argument {', '.join(unused)}")


def _task_fn(name: str):
    from inspect_ai._util.registry import registry_lookup

    import k3.eval.inspect.registry  # noqa: F401  (registers k3's tasks)

    return registry_lookup("task", TASKS[name])


def resolve(spec: str, task_args: dict, limit: int | None, epochs: int):
    """A task name as given -> (what eval() takes, the parameters it takes). k3's tasks take `NAME:PATH` for
    their data file, and draw a stratified `limit` and their repeats (`epochs`) themselves; a task argument
    goes to the tasks that take it."""
    precheck([spec], {})
    name, _, path = spec.partition(":")
    if name not in TASKS:
        return spec, None
    fn = _task_fn(name)
    accepted = set(pyinspect.signature(fn).parameters)
    given = {**task_args, **({"path": path} if path else {}), "limit": limit, "epochs": epochs}
    return fn(**{k: v for k, v in given.items() if k in accepted and v is not None}), accepted


def _resolve_all(r: Run) -> list[tuple]:
    """Every task built before any runs (a bad data file fails at once)."""
    precheck(r.tasks, r.task_args)
    # The constraint sweep reaches the model's own context unless told otherwise.
    args = {"context": r.target.context, **r.task_args} if r.target.context else r.task_args
    return [resolve(spec, args, r.limit, r.epochs) for spec in r.tasks]


def run(r: Run) -> tuple[list, dict, list[Path]]:
    """-> (Inspect logs, k3's report, the report files). Provenance goes into every log's metadata."""
    judge = prov.check_judge(r.judge.identity(), r.target.identity(), r.dependent_judge) if r.judge else None
    meta = {"k3": prov.provenance(r.target.fingerprint, r.target.server) | {"judge": judge}}
    logs = []
    for task, took in _resolve_all(r):
        took = took or set()
        logs += inspect_eval(task, model=r.target.model, model_roles={"grader": r.judge.model} if r.judge else None,
                             task_args=r.task_args if isinstance(task, str) else {},
                             limit=None if "limit" in took else r.limit,
                             epochs=None if "epochs" in took or r.epochs == 1 else r.epochs,
                             approval=r.approval, log_dir=r.log_dir, metadata=meta,
                             display="rich" if r.progress else "none", **r.config.model_dump(exclude_none=True))
    report = reports.build(logs, r.prices)
    return logs, report, reports.write(report, Path(r.log_dir))
