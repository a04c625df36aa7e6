"""Verdicts the tested code cannot forge: the check runs in a judge process, the tested code in a worker.

Inside one sandboxed run the launcher forks before it locks the run down. The worker (the child) takes
every layer (seccomp, the audit hook) and serves requests over two pipes: import a workspace module,
load the answer file, get an attribute, call, len, iter, item, contains, bool, str. The judge (the
parent) is made non-dumpable, so the worker can neither read its memory nor open its fds through
/proc, and seccomp stops signals and ptrace between them. The judge runs the check — which the worker
never sees: it reaches the judge on a pipe the worker closed — with the workspace's modules as proxies
whose every use is a request, and writes its verdict on the report fd the worker closed too.

Only plain data crosses from the worker (None, bool, int, float, str, bytes, and lists, tuples, dicts,
sets of them, checked by exact type): any other object stays in the worker and the judge holds a
handle to it. A handle equals only itself, so an object whose `__eq__` always answers True cannot pass
an `assert f(x) == y`, and `os._exit(0)` at import ends the worker, not the verdict. A worker that
hangs is cut by the run's wall limit, which leaves no verdict: a failure.

Standard library only: the launcher loads this file by path inside the sandbox."""

import builtins
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import types


def _wire():
    spec = importlib.util.spec_from_file_location("_k3_sandbox_wire", os.path.join(os.path.dirname(__file__), "wire.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


wire = _wire()
RemoteError, Lines, encode, decode, send = wire.RemoteError, wire.Lines, wire.encode, wire.decode, wire.send
MAX_ITEMS = 100_000        # items of one iterable sent back
MAX_NAMES = 1000           # public names of an answer module the check sees


# -- the worker: untrusted side -------------------------------------------------------------------------
def _answer_findings(src, checker_path):
    """Static findings about an answer before it runs: code_checker.py's hallucination checks, loaded by path."""
    if not checker_path:
        return {}
    spec = importlib.util.spec_from_file_location("_k3_code_checker", checker_path)
    checker = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(checker)
    return checker.findings(src)


def serve(req_fd, resp_fd, root):
    """Answer the judge's requests until it closes the pipe. Runs with every sandbox layer on."""
    handles, lines = [], Lines(req_fd)
    sys.path[0] = root
    while True:
        try:
            msg = lines.read()
        except RemoteError:
            os._exit(0)
        try:
            reply = {"ok": _serve_one(msg, handles, resp_fd)}
        except BaseException as e:  # the tested code may raise anything, SystemExit included
            reply = {"error": [type(e).__name__, str(e)[:2000]]}
        try:
            send(resp_fd, reply)
        except (TypeError, ValueError) as e:
            send(resp_fd, {"error": ["TypeError", f"unsendable result: {e}"]})


def _serve_one(msg, handles, resp_fd):
    """One request -> its encoded result. "answer" sends the static findings on `resp_fd` first, before the
    answer runs (so they are taken before any of its code could change them), then runs it."""
    op = msg["op"]
    if op == "import":
        return encode(__import__(msg["name"], fromlist=["*"]), handles)
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
    args = [decode(a, handles.__getitem__) for a in msg.get("args", [])]
    if op == "getattr":
        return encode(getattr(target, msg["name"]), handles)
    if op == "call":
        kwargs = {k: decode(v, handles.__getitem__) for k, v in msg.get("kwargs", {}).items()}
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
    unary = {"len": len, "bool": bool, "str": str, "repr": repr}
    if op in unary:
        return encode(unary[op](target), handles)
    if op == "item":
        return encode(target[args[0]], handles)
    if op == "contains":
        return encode(args[0] in target, handles)
    raise ValueError(f"unknown request {op!r}")


# -- the judge: trusted side ----------------------------------------------------------------------------
class Link:
    def __init__(self, req_fd, resp_fd):
        self.req_fd, self.lines = req_fd, Lines(resp_fd)

    def ask(self, op, **fields):
        send(self.req_fd, {"op": op, **fields})
        return self.reply()

    def reply(self):
        msg = self.lines.read()
        if type(msg) is not dict:
            raise RemoteError("malformed reply from the code under test")
        if "error" in msg:
            raise _exception(msg["error"])
        return decode(msg.get("ok"), self.handle)

    def handle(self, ident, type_name):
        if type(ident) is not int:
            raise RemoteError("malformed handle from the code under test")
        return Handle(self, ident, str(type_name))


def _exception(error):
    """A built-in exception of the worker's exception's name (so `except IndexError` works), else RemoteError."""
    try:
        name, text = str(error[0]), str(error[1])
    except (TypeError, IndexError, KeyError):
        return RemoteError("malformed error from the code under test")
    cls = getattr(builtins, name, None)
    if isinstance(cls, type) and issubclass(cls, Exception) and cls.__module__ == "builtins":
        try:
            return cls(text)
        except Exception:
            pass
    return RemoteError(f"{name}: {text}")


class Handle(wire.Handle):
    """An object that lives in the worker. Equal only to itself; everything else is a request."""

    def __init__(self, link, ident, type_name):
        object.__setattr__(self, "_k3_link", link)
        object.__setattr__(self, "_k3_id", ident)
        object.__setattr__(self, "_k3_type", type_name)

    def _ask(self, op, *args, **kwargs):
        return self._k3_link.ask(op, h=self._k3_id, args=[encode(a) for a in args],
                                 kwargs={k: encode(v) for k, v in kwargs.items()})

    def __getattr__(self, name):
        if name.startswith("_k3_"):
            raise AttributeError(name)
        return self._k3_link.ask("getattr", h=self._k3_id, name=name)

    def __call__(self, *args, **kwargs):
        return self._ask("call", *args, **kwargs)

    def __len__(self):
        n = self._ask("len")
        if type(n) is not int:
            raise TypeError("len() of the code under test's object is not an int")
        return n

    def __bool__(self):
        b = self._ask("bool")
        if type(b) is not bool:
            raise TypeError("bool() of the code under test's object is not a bool")
        return b

    def __iter__(self):
        return iter(self._ask("iter"))

    def __getitem__(self, key):
        return self._ask("item", key)

    def __contains__(self, item):
        return self._ask("contains", item) is True

    def __str__(self):
        return str(self._ask("str"))

    def __repr__(self):
        return f"<{self._k3_type} in the sandbox's worker>"

    def __eq__(self, other):
        return self is other

    def __hash__(self):
        return hash((id(self._k3_link), self._k3_id))


class RemoteModule(types.ModuleType):
    """A workspace module as the judge sees it: every attribute is asked of the worker."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return self.__dict__["_k3_handle"].__getattr__(name)


class WorkspaceFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Last on the judge's meta path: a module found nowhere else but in the workspace becomes a proxy."""

    def __init__(self, link, root):
        self.link, self.root = link, root

    def find_spec(self, name, path=None, target=None):
        top = os.path.join(self.root, *name.split("."))
        if os.path.isfile(top + ".py") or os.path.isfile(os.path.join(top, "__init__.py")):
            return importlib.machinery.ModuleSpec(name, self, is_package=os.path.isdir(top))
        return None

    def create_module(self, spec):
        module = RemoteModule(spec.name)
        module.__dict__["_k3_handle"] = self.link.ask("import", name=spec.name)
        if os.path.isdir(os.path.join(self.root, *spec.name.split("."))):
            module.__path__ = []
        return module

    def exec_module(self, module):
        pass


def run_check(payload, link, root):
    """Run the trusted check -> {"passes", "error", "findings", "runs"}."""
    verdict = {"passes": False, "error": "", "findings": {}, "runs": None}
    namespace = {"__name__": "__k3_check__", "__builtins__": builtins}
    try:
        if payload.get("answer"):
            verdict["runs"] = False
            findings = link.ask("answer", path=payload["answer"], name="__k3_answer__", checker=payload.get("checker"))
            verdict["findings"] = findings.get("findings", {}) if type(findings) is dict else {}
            answer = link.reply()
            verdict["runs"] = True
            for name in answer._ask("names")[:MAX_NAMES]:
                namespace[name] = answer.__getattr__(name)
        if payload.get("prelude"):
            trusted = {"__name__": "__k3_prelude__", "__builtins__": builtins}
            exec(_prelude(payload["prelude"]), trusted)
            keep = set(payload.get("from_answer", []))
            namespace.update({k: v for k, v in trusted.items() if k not in keep and not k.startswith("__")})
        exec(compile(payload["check"], "<check>", "exec"), namespace)
        verdict["passes"] = True
    except BaseException as e:
        verdict["error"] = f"{type(e).__name__}: {e}"[:500]
    return verdict


def _prelude(source):
    """The trusted prelude compiled; a prompt that ends in a bare signature (completion style) gets a body,
    and one that still does not compile gives no names."""
    for text in (source, source.rstrip() + "\n    pass\n"):
        try:
            return compile(text, "<prelude>", "exec")
        except SyntaxError:
            continue
    return compile("", "<prelude>", "exec")
