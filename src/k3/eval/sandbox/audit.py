"""The sandbox's last line: a Python audit hook (PEP 578) installed just before the untrusted script.

It refuses socket connects and binds, process creation and signals, every ctypes operation (loading a
library, calling a foreign function, reading or writing raw memory), and writes, permission or time
changes, removals and links outside the workspace. A hook written in Python lives in the same
interpreter as the code it watches, so it also refuses the ways that code could reach the hook
itself and disable it: walking the garbage collector's object graph (gc.get_objects/get_referrers/
get_referents, the route to the hook's closure cells), replacing a function's code, and importing
ctypes. The kernel layers, not this hook, are the boundary; the hook makes the first escape fail
loudly with a clear PermissionError instead of an odd errno.

Standard library only: the launcher loads this file by path inside the sandbox."""

import os
import sys

WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
BLOCKED = frozenset((
    "socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg",
    "os.fork", "os.forkpty", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "subprocess.Popen",
    "os.kill", "os.killpg", "signal.pthread_kill", "os.startfile",
    "gc.get_objects", "gc.get_referrers", "gc.get_referents",
    "sys.setprofile", "sys.settrace", "sys._current_frames",
))
PATH_EVENTS = {  # event -> indices of the path arguments it changes
    "os.chmod": (0,), "os.chown": (0,), "os.utime": (0,), "os.remove": (0,), "os.rmdir": (0,),
    "os.mkdir": (0,), "os.rename": (0, 1), "os.link": (0, 1), "os.symlink": (1,), "os.truncate": (0,),
    "os.chflags": (0,), "os.setxattr": (0,), "os.removexattr": (0,), "shutil.rmtree": (0,),
}
FORBIDDEN_MODULES = frozenset(("ctypes", "_ctypes"))


def _inside(path, root: str) -> bool:
    try:
        real = os.path.realpath(os.fsdecode(path))
    except (TypeError, ValueError):
        return False
    return real == root or real.startswith(root + os.sep) or real == "/dev/null"


def _refuse(what: str):
    raise PermissionError(f"sandbox: {what} is not allowed")


def install(root: str) -> None:
    """Add the hook for the workspace `root` (a real path). Irreversible for the interpreter."""
    root = str(root)

    def hook(event, args):
        if event in BLOCKED or event.startswith("ctypes."):
            _refuse(event)
        if event == "import" and args and str(args[0]).split(".")[0] in FORBIDDEN_MODULES:
            # an ImportError, as for a module that is not there: libraries that can do without ctypes (numpy)
            # catch it and carry on, where a PermissionError would stop their import
            raise ImportError(f"sandbox: importing {args[0]} is not allowed", name=str(args[0]))
        if event == "object.__setattr__" and len(args) >= 2 and args[1] in ("__code__", "__globals__"):
            _refuse(f"replacing {args[1]}")
        if event == "open" and len(args) >= 3:
            path, mode, flags = args[0], args[1] or "", args[2] or 0
            writing = any(c in str(mode) for c in "wax+") or (isinstance(flags, int) and flags & WRITE_FLAGS)
            if writing and isinstance(path, (str, bytes, os.PathLike)) and not _inside(path, root):
                _refuse(f"writing outside the workspace ({path!r})")
        elif event in PATH_EVENTS:
            for i in PATH_EVENTS[event]:
                path = args[i] if len(args) > i else None
                if isinstance(path, (str, bytes, os.PathLike)) and not _inside(path, root):
                    _refuse(f"{event} outside the workspace ({path!r})")

    sys.addaudithook(hook)
    for name in list(sys.modules):  # the launcher used ctypes; the script must import it anew (refused)
        if name.split(".")[0] in FORBIDDEN_MODULES:
            del sys.modules[name]
