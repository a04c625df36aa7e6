"""The worker's side of a judged run (judge.py): the untrusted process that holds the code under test, under
every layer of the sandbox, and answers the judge's requests over a pipe, one at a time. Nothing it sends
is trusted: the judge rebuilds every value as its own (wire.py). Standard library only (the launcher loads
this file by path inside the sandbox)."""

import importlib.util
import os
import sys
import types

import _k3_sandbox_wire as wire   # wire.py, which the launcher loads by path and registers under this name first

RemoteError, Lines, encode, decode, send = wire.RemoteError, wire.Lines, wire.encode, wire.decode, wire.send
MAX_ITEMS = 100_000        # items of one iterable sent back


def _answer_findings(src, checker_path):
    """Static findings about an answer before it runs: code_checker.py's hallucination checks, loaded by path."""
    if not checker_path:
        return {}
    spec = importlib.util.spec_from_file_location("_k3_code_checker", checker_path)
    checker = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(checker)
    return checker.findings(src)


def serve(req_fd, resp_fd, root, modules=None):
    """Answer the judge's requests until it closes the pipe. Runs with every sandbox layer on. `modules`: the
    top-level names the judge may import from the workspace (None: any)."""
    handles, lines = [], Lines(req_fd)
    sys.path[0] = root
    while True:
        try:
            msg = lines.read()
        except RemoteError:
            os._exit(0)
        try:
            reply = {"ok": _serve_one(msg, handles, resp_fd, root, modules)}
        except BaseException as e:  # the tested code may raise anything, SystemExit included
            lineage = wire.exception_lineage(type(e))
            reply = {"error": [type(e).__name__, str(e)[:2000], _bases(type(e)), lineage[0] if lineage else []]}
        try:
            send(resp_fd, reply)
        except (TypeError, ValueError) as e:
            send(resp_fd, {"error": ["TypeError", f"unsendable result: {e}", []]})


def _bases(cls):
    try:
        return [c.__name__ for c in cls.__mro__ if c.__module__ == "builtins"][:20]
    except Exception:
        return []


def _import(name, root, modules):
    """A workspace module; a declared name that resolves anywhere else (an installed copy) is refused, so a
    deleted module cannot be stood in for by the pristine one from site-packages."""
    if modules is not None and name.split(".")[0] not in modules:
        raise ImportError(f"{name} is not a module of the repository under test")
    module = __import__(name, fromlist=["*"])
    where = getattr(module, "__file__", None)
    if modules is not None and not (isinstance(where, str) and os.path.realpath(where).startswith(root + os.sep)):
        raise ImportError(f"{name} is not in the workspace")
    return module


def _serve_one(msg, handles, resp_fd, root, modules):
    """One request -> its encoded result. "answer" sends the static findings on `resp_fd` first, before the
    answer runs (so they are taken before any of its code could change them), then runs it."""
    op = msg["op"]
    if op == "import":
        module = _import(msg["name"], root, modules)
        return {"d": [["module", encode(module, handles)], ["package", hasattr(module, "__path__")]]}
    if op == "answer":
        with open(msg["path"], encoding="utf-8", errors="replace") as f:
            src = f.read()
        found = _answer_findings(src, msg.get("checker"))
        send(resp_fd, {"ok": {"d": [["findings", encode(found)]]}})
        module = types.ModuleType(msg["name"])
        module.__file__ = msg["path"]
        sys.modules[msg["name"]] = module
        exec(compile(src, "<answer>", "exec"), module.__dict__)
        return encode(module, handles)
    target = handles[msg["h"]]
    ref = lambda ident, *_: handles[ident]      # noqa: E731  (the judge's handles are the worker's objects)
    args = [decode(a, ref) for a in msg.get("args", [])]
    if op == "getattr":
        return encode(getattr(target, msg["name"]), handles, live=True)
    if op == "call":
        kwargs = {k: decode(v, ref) for k, v in msg.get("kwargs", {}).items()}
        return encode(target(*args, **kwargs), handles)
    if op == "names":
        return encode([n for n in dir(target) if type(n) is str and not n.startswith("_")], handles)
    if op == "iter":
        out = []
        for v in target:
            out.append(v)
            if len(out) > MAX_ITEMS:
                raise ValueError(f"an iterable over {MAX_ITEMS} items")
        return encode(out, handles)
    if op == "value":       # the object as plain data, or an error: never a handle
        return encode(target)
    unary = {"len": len, "bool": bool, "str": str, "repr": repr}
    if op in unary:
        return encode(unary[op](target), handles)
    if op == "item":
        return encode(target[args[0]], handles)
    if op == "contains":
        return encode(args[0] in target, handles)
    if op == "isinstance":
        return encode(isinstance(args[0], target), handles)
    raise ValueError(f"unknown request {op!r}")
