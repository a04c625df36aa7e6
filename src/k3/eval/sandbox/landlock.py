"""Linux Landlock (kernel >= 5.13) through raw syscalls. After `restrict(workspace, readable)` this process
and its children can write only under `workspace` (and /dev/null), read and execute only under
`workspace` and the paths in `readable` (the interpreter, the launcher, the one script of this run),
and, with Landlock ABI >= 4, cannot bind or connect TCP sockets. A directory may also be granted for listing
only, which hides what lies beneath it unless granted on its own. Unprivileged and irreversible.
Returns the ABI used, or 0 when the kernel has no Landlock. Standard library only."""

from __future__ import annotations

import ctypes
import os
import platform

SYSCALLS = {"x86_64": (444, 445, 446), "aarch64": (444, 445, 446)}
RULE_PATH_BENEATH = 1
PR_SET_NO_NEW_PRIVS = 38
EXECUTE, WRITE_FILE, READ_FILE, READ_DIR, REMOVE_DIR, REMOVE_FILE = 1 << 0, 1 << 1, 1 << 2, 1 << 3, 1 << 4, 1 << 5
MAKE_ALL = sum(1 << b for b in range(6, 13))  # char, dir, reg, sock, fifo, block, sym
REFER, TRUNCATE = 1 << 13, 1 << 14
FILE_ONLY = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE   # the rights a rule on a file (not a directory) may hold
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _syscalls():
    return SYSCALLS.get(platform.machine())


def abi_version() -> int:
    calls = _syscalls()
    if calls is None:
        return 0
    libc = ctypes.CDLL(None, use_errno=True)
    v = libc.syscall(calls[0], None, ctypes.c_size_t(0), ctypes.c_uint32(1))  # LANDLOCK_CREATE_RULESET_VERSION
    return max(0, v)


def _fail(what: str):
    err = ctypes.get_errno()
    raise OSError(err, f"{what}: {os.strerror(err)}")


def restrict(workspace: str, readable: list[str] = (), listable: list[str] = ()) -> int:
    """Writes only under `workspace`; reads only beneath `readable`; directories in `listable` may be
    listed and crossed, but nothing beneath them is readable unless granted on its own (hidden.py)."""
    abi = abi_version()
    if abi < 1:
        return 0
    create, add_rule, restrict_self = _syscalls()
    libc = ctypes.CDLL(None, use_errno=True)
    read = EXECUTE | READ_FILE | READ_DIR
    write = WRITE_FILE | REMOVE_DIR | REMOVE_FILE | MAKE_ALL | (REFER if abi >= 2 else 0) | (TRUNCATE if abi >= 3 else 0)
    net = NET_BIND_TCP | NET_CONNECT_TCP if abi >= 4 else 0
    attr = (ctypes.c_uint64 * 2)(read | write, net)
    fd = libc.syscall(create, ctypes.byref(attr), ctypes.c_size_t(16 if abi >= 4 else 8), ctypes.c_uint32(0))
    if fd < 0:
        _fail("landlock_create_ruleset")
    rules = [(workspace, read | write), ("/dev/null", READ_FILE | WRITE_FILE | (TRUNCATE if abi >= 3 else 0))]
    rules += [(path, read) for path in readable] + [(path, READ_DIR) for path in listable]
    for path, access in rules:
        try:
            pfd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            continue  # a readable path this system lacks grants nothing
        if not os.path.isdir(path):
            access &= FILE_ONLY
        rule = _PathBeneath(access, pfd)
        ok = libc.syscall(add_rule, fd, RULE_PATH_BENEATH, ctypes.byref(rule), ctypes.c_uint32(0)) == 0
        os.close(pfd)
        if not ok:
            _fail(f"landlock_add_rule {path}")
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 or libc.syscall(restrict_self, fd, ctypes.c_uint32(0)) != 0:
        _fail("landlock_restrict_self")
    os.close(fd)
    return abi
