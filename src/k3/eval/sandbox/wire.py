"""The wire between the sandbox's judge and its worker (judge.py): one JSON line a message, plain data tagged
by exact type, anything else a handle. Standard library only (loaded by path inside the sandbox)."""

import json
import os

MAX_MESSAGE = 16 << 20     # bytes of one message between judge and worker
PLAIN = (type(None), bool, int, float, str)


class RemoteError(Exception):
    """The worker raised an exception that is not a built-in one, or broke the protocol."""


class Handle:
    """Marker base for the judge's proxies of worker objects (judge.Handle): encoded as their id."""

    _k3_id = -1


def encode(value, handles=None, depth=0):
    """A value as JSON-ready data; anything not plain becomes a handle (worker) or is refused (judge)."""
    if depth > 100:
        raise ValueError("data nested over 100 deep")
    kind = type(value)
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
    if handles is None:
        raise TypeError(f"the checker cannot pass a {kind.__name__} to the code under test")
    handles.append(value)
    return {"h": len(handles) - 1, "type": kind.__name__}


def decode(data, make_handle=None, depth=0):
    """The inverse of `encode`; handles become `make_handle(id, type)` (judge) or the worker's objects."""
    if depth > 100:
        raise RemoteError("data nested over 100 deep")
    if data is None or type(data) in (bool, int, str):
        return data
    if type(data) is not dict or len(data) not in (1, 2):
        raise RemoteError("malformed data from the code under test")
    tag, body = next(iter(data.items()))
    if tag == "f":
        return float(body)
    if tag == "b":
        return bytes.fromhex(body)
    if tag == "h":
        return make_handle(body, data.get("type", "object"))
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


def send(fd, message):
    data = (json.dumps(message, allow_nan=True) + "\n").encode()
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


class Lines:
    """Reads one JSON message a line from `fd`, at most MAX_MESSAGE bytes each."""

    def __init__(self, fd):
        self.fd, self.buf = fd, b""

    def read(self):
        while b"\n" not in self.buf:
            if len(self.buf) > MAX_MESSAGE:
                raise RemoteError("a message from the code under test is over the size limit")
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
