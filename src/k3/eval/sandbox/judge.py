"""Verdicts the tested code cannot forge: the check runs in a judge process, the tested code in a worker.

Inside one sandboxed run the launcher forks before it locks the run down. The worker (the child) takes
every layer (seccomp, the audit hook) and serves requests over two pipes (worker.py): import a workspace
module, load the answer file, get an attribute, call, len, iter, item, contains, isinstance, bool, str,
value. This file is the judge's side.
The judge (the parent) is made non-dumpable, so the worker can neither read its memory nor open its fds
through /proc, and seccomp stops signals and ptrace between them. The judge runs the check (a snippet,
or a pytest suite: pytest_judge.py), which the worker never sees: it reaches the judge on a pipe the
worker closed, and test files lie where only the judge may read. The workspace's modules are proxies
whose every use is a request; the verdict goes out on the report fd the worker closed too.

Only plain data crosses from the worker (None, bool, int, float, str, bytes, lists, tuples, dicts, sets
of them, and numpy arrays of numbers; wire.py), rebuilt by the judge as its own objects: any other
object stays in the worker and the judge holds a handle to it. A handle compared with a value is
compared here, on its plain value, so an object whose `__eq__` always answers True cannot pass an
`assert f(x) == y`; and `os._exit(0)` at import ends the worker, not the verdict. A request the worker
does not answer in time stops the worker: every later request fails, the verdict still comes.

Standard library only: the launcher loads this file by path inside the sandbox."""

import builtins
import importlib.abc
import importlib.machinery
import os
import sys
import types

import _k3_sandbox_wire as wire   # wire.py, which the launcher loads by path and registers under this name first

RemoteError, Lines, encode, decode, send = wire.RemoteError, wire.Lines, wire.encode, wire.decode, wire.send
MAX_NAMES = 1000           # public names of an answer module the check sees


class Link:
    """The judge's end of the pipes. `timeout`: seconds the worker has for one request (None: the run's wall
    limit decides); a worker past it is killed (`pid`) and every later request fails at once, so one hung
    call fails the checks that need the worker instead of the whole verdict."""

    def __init__(self, req_fd, resp_fd, pid=None, timeout=None):
        self.req_fd, self.lines, self.pid, self.timeout = req_fd, Lines(resp_fd), pid, timeout
        self.gone = None
        self.classes = {}    # qualified name -> the judge's stand-in for an exception class of the code under test

    def ask(self, op, **fields):
        if self.gone:
            raise RemoteError(self.gone)
        try:
            send(self.req_fd, {"op": op, **fields})
        except OSError:
            self.gone = "the code under test ended the process"
            raise RemoteError(self.gone) from None
        return self.reply()

    def reply(self):
        try:
            msg = self.lines.read(self.timeout)
        except TimeoutError as e:
            self._end(str(e))
            raise
        except RemoteError as e:
            self.gone = str(e)
            raise
        if type(msg) is not dict:
            raise RemoteError("malformed reply from the code under test")
        if "error" in msg:
            raise _exception(msg["error"], self)
        return decode(msg.get("ok"), self.handle)

    def _end(self, why):
        self.gone = f"{why}; the code under test was stopped"
        if self.pid:
            try:
                os.kill(self.pid, 9)
            except OSError:
                pass

    def handle(self, ident, type_name, is_callable=False, lineage=None):
        if type(ident) is not int:
            raise RemoteError("malformed handle from the code under test")
        cls = self.exception_class(lineage) if lineage is not None else None
        return cls or (CallableHandle if is_callable else Handle)(self, ident, str(type_name))

    def exception_class(self, lineage):
        """The judge's own class for an exception class of the code under test (wire.stand_in)."""
        return wire.stand_in(self.classes, lineage)


def _exception(error, link=None):
    """An exception for the worker's (wire.exception_for), its stand-in classes kept by the link."""
    return wire.exception_for(error, link.classes if link is not None else None)


class Handle(wire.Handle):
    """An object that lives in the worker. Compared with anything but itself, its value is fetched as plain
    data and compared here (an object of no plain value equals only itself); everything else is a request."""

    def __init__(self, link, ident, type_name):
        object.__setattr__(self, "_k3_link", link)
        object.__setattr__(self, "_k3_id", ident)
        object.__setattr__(self, "_k3_type", type_name)

    def _ask(self, op, *args, **kwargs):
        return self._k3_link.ask(op, h=self._k3_id, args=[encode(a) for a in args],
                                 kwargs={k: encode(v) for k, v in kwargs.items()})

    def _value(self):
        return self._ask("value")

    def __getattr__(self, name):
        if name.startswith("_k3_") or name in ("__array_interface__", "__array_struct__"):
            raise AttributeError(name)
        return self._k3_link.ask("getattr", h=self._k3_id, name=name)

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

    def __instancecheck__(self, obj):
        return self._ask("isinstance", obj) is True

    def __str__(self):
        return str(self._ask("str"))

    def __repr__(self):
        return f"<{self._k3_type} in the sandbox's worker>"

    def __eq__(self, other):
        if other is self:
            return True
        if isinstance(other, wire.Handle):
            return False
        try:
            value = self._value()
        except (RemoteError, TypeError):
            return False
        return value == other

    def __ne__(self, other):
        return not self.__eq__(other)

    def __hash__(self):
        return hash((id(self._k3_link), self._k3_id))

    def __float__(self):
        return float(self._value())

    def __int__(self):
        return int(self._value())

    def __index__(self):
        return int(self._value())

    def __array__(self, dtype=None, copy=None):
        import numpy as np

        return np.asarray(self._value(), dtype=dtype)


class CallableHandle(Handle):
    """A worker object that is callable (a function, a class, a bound method): calling it is a request."""

    def __call__(self, *args, **kwargs):
        return self._ask("call", *args, **kwargs)


class RemoteModule(types.ModuleType):
    """A workspace module as the judge sees it: every attribute is asked of the worker (`from lib import *` takes
    its `__all__`, else its public names)."""

    def __getattr__(self, name):
        handle = self.__dict__["_k3_handle"]
        if name == "__all__":
            try:
                names = handle.__getattr__("__all__")
            except (AttributeError, RemoteError):
                names = handle._ask("names")
            return [str(n) for n in names][:MAX_NAMES]
        if name.startswith("__"):
            raise AttributeError(name)
        return handle.__getattr__(name)


class WorkspaceFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Proxies for workspace modules in the judge. With `modules` (the repository's top-level names), it goes
    first on the meta path and answers exactly those names, wherever else they could be found: a name the
    repository declares is always the workspace's code, and a name it does not (an agent's `numpy.py`) is
    never proxied. Without it, it goes last and proxies any module found nowhere else but in the workspace."""

    def __init__(self, link, root, modules=None):
        self.link, self.root, self.modules = link, root, None if modules is None else frozenset(modules)

    def find_spec(self, name, path=None, target=None):
        if self.modules is not None:
            if name.split(".")[0] not in self.modules:
                return None
            return importlib.machinery.ModuleSpec(name, self)
        top = os.path.join(self.root, *name.split("."))
        if os.path.isfile(top + ".py") or os.path.isfile(os.path.join(top, "__init__.py")):
            return importlib.machinery.ModuleSpec(name, self, is_package=os.path.isdir(top))
        return None

    def create_module(self, spec):
        try:
            found = self.link.ask("import", name=spec.name)
        except (RemoteError, TimeoutError) as e:
            raise ImportError(f"{spec.name}: {e}") from None
        if type(found) is not dict or not isinstance(found.get("module"), Handle):
            raise ImportError(f"{spec.name}: malformed reply from the code under test")
        module = RemoteModule(spec.name)
        module.__dict__["_k3_handle"] = found["module"]
        if found.get("package") is True:
            module.__path__ = []
        return module

    def exec_module(self, module):
        pass

    def install(self):
        if self.modules is None:
            sys.meta_path.append(self)
        else:
            sys.meta_path.insert(0, self)


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
