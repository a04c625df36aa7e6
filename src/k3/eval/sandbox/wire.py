"""The wire between the sandbox's judge and its worker (judge.py): one JSON line a message, plain data tagged
by exact type, anything else a handle. Standard library only (loaded by path inside the sandbox); numpy is
used only where it is already imported (the worker's arrays) or asked for (the judge decoding one).

Everything the judge receives is rebuilt from JSON as the judge's own objects of built-in types (or
numpy arrays of numbers built from raw bytes), so no object of the worker's ever runs code in the judge:
the worker can send wrong values, never a value that behaves."""

import builtins
import json
import os
import select
import sys
import time

MAX_MESSAGE = 16 << 20     # bytes of one message between judge and worker
PLAIN = (type(None), bool, int, float, str)
LIVE = (list, dict, set, bytearray)   # attributes of these types stay in the worker (their state is shared)
NUMERIC = "?biufc"         # numpy dtype kinds that may cross: bool, integers, floats, complex


class RemoteError(Exception):
    """The worker raised an exception that is not a built-in one, or broke the protocol."""


class Handle:
    """Marker base for the judge's proxies of worker objects (judge.Handle): encoded as their id."""

    _k3_id = -1


def encode(value, handles=None, depth=0, live=False):
    """A value as JSON-ready data; anything not plain becomes a handle (worker) or is refused (judge).
    `live` (the worker answering getattr): a mutable container stays in the worker as a handle, so that
    `module.REGISTRY.add(x)` changes the worker's registry, not a copy."""
    if depth > 100:
        raise ValueError("data nested over 100 deep")
    kind = type(value)
    if live and handles is not None and kind in LIVE:
        return _handle(value, handles)
    if kind in PLAIN:
        return {"f": repr(value)} if kind is float else value
    if kind is bytes:
        return {"b": value.hex()}
    if kind in (list, tuple, set, frozenset):
        tag = {list: "l", tuple: "u", set: "s", frozenset: "z"}[kind]
        return {tag: [encode(v, handles, depth + 1) for v in value]}
    if kind is dict:
        return {"d": [[encode(k, handles, depth + 1), encode(v, handles, depth + 1)] for k, v in value.items()]}
    if issubclass(kind, Handle):
        return {"h": value._k3_id}
    array = _array(value)
    if array is not None:
        return array
    if handles is None:
        raise TypeError(f"the checker cannot pass a {kind.__name__} to the code under test")
    return _handle(value, handles)


def _handle(value, handles):
    handles.append(value)
    out = {"h": len(handles) - 1, "type": type(value).__name__, "call": callable(value)}
    lineage = exception_lineage(value)
    if lineage is not None:
        out["exc"] = lineage
    return out


def exception_lineage(cls):
    """For an exception class of the code under test: [[its qualified name and those of its bases that are not
    built-in, in MRO order], [its built-in bases' names]], which the judge rebuilds as its own classes
    (judge.Link.exception_class) so `pytest.raises(SceneError)` works; None for anything else."""
    try:
        if not isinstance(cls, type) or not issubclass(cls, BaseException) or cls.__module__ == "builtins":
            return None
        mro = cls.__mro__
        return [[f"{c.__module__}.{c.__qualname__}" for c in mro if c.__module__ != "builtins"][:20],
                [c.__name__ for c in mro if c.__module__ == "builtins"][:20]]
    except Exception:
        return None


def _array(value):
    """A numpy array or scalar of numbers as {"a": [dtype, shape, hex]} / {"n": [dtype, hex]}; else None."""
    np = sys.modules.get("numpy")
    if np is None:
        return None
    kind = type(value)
    if kind is np.ndarray and value.dtype.kind in NUMERIC and not value.dtype.hasobject:
        return {"a": [value.dtype.str, list(value.shape), np.ascontiguousarray(value).tobytes().hex()]}
    if isinstance(value, np.generic) and kind.__module__ == "numpy" and value.dtype.kind in NUMERIC:
        return {"n": [value.dtype.str, value.tobytes().hex()]}
    return None


# Built-in exceptions a remote error is never raised as in the judge: they steer control flow, not report a fault.
NOT_MAPPED = ("StopIteration", "StopAsyncIteration", "GeneratorExit", "KeyboardInterrupt", "SystemExit",
              "BaseException", "BaseExceptionGroup", "ExceptionGroup")


def _mappable(name):
    cls = getattr(builtins, name, None)
    return (name not in NOT_MAPPED and isinstance(cls, type) and issubclass(cls, Exception)
            and cls.__module__ == "builtins")


def stand_in(classes, lineage):
    """The judge's own class for an exception class of the code under test, built from its names alone
    (exception_lineage): a subclass of its first mappable built-in base and of its stand-in bases, the same
    class each time (`classes`: qualified name -> class, the judge's cache), so `pytest.raises(SceneError)`
    catches what the worker raised as one. None when the lineage is malformed."""
    try:
        names, builtin = [str(n)[:200] for n in lineage[0]][:20], [str(b) for b in lineage[1]][:20]
    except (TypeError, IndexError, KeyError):
        return None
    base = next((getattr(builtins, b) for b in builtin if _mappable(b)), Exception)
    cls = None
    for qualified in reversed(names):
        if qualified not in classes:
            module, _, qualname = qualified.rpartition(".") if "." in qualified else ("", "", qualified)
            name = qualname.rpartition(".")[2] or "RemoteException"
            classes[qualified] = type(name, (cls or base,), {"__module__": module, "__qualname__": qualname})
        cls = classes[qualified]
    return cls


def exception_for(error, classes=None):
    """The judge's exception for the worker's error [name, text, built-in bases, lineage]: the code under
    test's own class as a stand-in (`except SceneError` and `except ValueError` both catch a
    `SceneError(ValueError)`), else of the first built-in class in its MRO, named in the text; else
    RemoteError."""
    try:
        name, text = str(error[0]), str(error[1])
        bases = [str(b) for b in error[2]] if len(error) > 2 and isinstance(error[2], list) else [name]
        lineage = error[3] if len(error) > 3 and isinstance(error[3], list) else []
    except (TypeError, IndexError, KeyError):
        return RemoteError("malformed error from the code under test")
    own = stand_in(classes, [lineage, bases]) if classes is not None and lineage else None
    if own is not None:
        try:
            return own(text)
        except Exception:
            pass
    for base in bases:
        if _mappable(base):
            try:
                return getattr(builtins, base)(text if base == name else f"{name}: {text}")
            except Exception:
                break
    return RemoteError(f"{name}: {text}")


def decode(data, make_handle=None, depth=0):
    """The inverse of `encode`; handles become `make_handle(id, type, callable, exception lineage)` (judge) or the
    worker's objects."""
    if depth > 100:
        raise RemoteError("data nested over 100 deep")
    if data is None or type(data) in (bool, int, str):
        return data
    if type(data) is not dict or not 1 <= len(data) <= 4:
        raise RemoteError("malformed data from the code under test")
    tag, body = next(iter(data.items()))
    if tag == "f":
        return float(body)
    if tag == "b":
        return bytes.fromhex(body)
    if tag == "h":
        return make_handle(body, data.get("type", "object"), data.get("call") is True, data.get("exc"))
    if tag in ("a", "n"):
        return _numpy(tag, body)
    items = [decode(v, make_handle, depth + 1) for v in body] if tag != "d" else None
    if tag == "l":
        return items
    if tag == "u":
        return tuple(items)
    if tag in ("s", "z"):
        return (set if tag == "s" else frozenset)(items)
    if tag == "d":
        return {decode(k, make_handle, depth + 1): decode(v, make_handle, depth + 1) for k, v in body}
    raise RemoteError(f"unknown tag {tag!r} from the code under test")


def _numpy(tag, body):
    """An array (or scalar) rebuilt by the judge's numpy from raw bytes, its dtype checked to be numeric."""
    import numpy as np

    try:
        dtype = np.dtype(str(body[0]))
        raw = bytes.fromhex(body[-1])
        if dtype.kind not in NUMERIC or dtype.hasobject or dtype.fields is not None:
            raise ValueError(f"dtype {dtype}")
        if tag == "n":
            if len(raw) != dtype.itemsize:
                raise ValueError("size")
            return np.frombuffer(raw, dtype=dtype)[0]
        shape = tuple(int(n) for n in body[1])
        if any(n < 0 for n in shape) or len(raw) != dtype.itemsize * _product(shape):
            raise ValueError("shape")
        return np.frombuffer(raw, dtype=dtype).reshape(shape).copy()
    except (TypeError, ValueError, IndexError) as e:
        raise RemoteError(f"malformed array from the code under test ({e})") from None


def _product(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def send(fd, message):
    data = (json.dumps(message, allow_nan=True) + "\n").encode()
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


class Lines:
    """Reads one JSON message a line from `fd`, at most MAX_MESSAGE bytes each; `timeout` seconds a message
    at most when given (None: wait as long as it takes)."""

    def __init__(self, fd):
        self.fd, self.buf = fd, b""

    def read(self, timeout=None):
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self.buf:
            if len(self.buf) > MAX_MESSAGE:
                raise RemoteError("a message from the code under test is over the size limit")
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                    raise TimeoutError(f"the code under test gave no answer within {timeout:g} s")
            chunk = os.read(self.fd, 1 << 16)
            if not chunk:
                raise RemoteError("the code under test ended the process")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)


def send_and_close(fd: int, payload: dict) -> None:
    """The judge's check, one JSON line on its pipe, then the pipe closed (the run may end before reading it)."""
    try:
        send(fd, payload)
    except OSError:
        pass
    finally:
        os.close(fd)
