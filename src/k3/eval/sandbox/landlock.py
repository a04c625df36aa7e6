"""Linux Landlock (kernel >= 5.13) through raw syscalls: after `restrict_writes(workspace)`, this process
and its children can write only under `workspace` (and /dev/null), and, with Landlock ABI >= 4, cannot
bind or connect TCP sockets. Unprivileged and irreversible. Returns the ABI used, or 0 when the kernel
has no Landlock (the launcher then falls back to audit hooks)."""

from __future__ import annotations

import ctypes
import os
import platform

SYSCALLS = {"x86_64": (444, 445, 446), "aarch64": (444, 445, 446)}
RULE_PATH_BENEATH = 1
PR_SET_NO_NEW_PRIVS = 38
WRITE_FILE, REMOVE_DIR, REMOVE_FILE = 1 << 1, 1 << 4, 1 << 5
MAKE_ALL = sum(1 << b for b in range(6, 13))  # char, dir, reg, sock, fifo, block, sym
REFER, TRUNCATE = 1 << 13, 1 << 14
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


def restrict_writes(workspace: str) -> int:
    abi = abi_version()
    if abi < 1:
        return 0
    create, add_rule, restrict = _syscalls()
    libc = ctypes.CDLL(None, use_errno=True)
    write = WRITE_FILE | REMOVE_DIR | REMOVE_FILE | MAKE_ALL | (REFER if abi >= 2 else 0) | (TRUNCATE if abi >= 3 else 0)
    net = NET_BIND_TCP | NET_CONNECT_TCP if abi >= 4 else 0
    attr = (ctypes.c_uint64 * 2)(write, net)
    fd = libc.syscall(create, ctypes.byref(attr), ctypes.c_size_t(16 if abi >= 4 else 8), ctypes.c_uint32(0))
    if fd < 0:
        raise OSError(ctypes.get_errno(), f"landlock_create_ruleset: {os.strerror(ctypes.get_errno())}")
    for path, access in ((workspace, write), ("/dev/null", WRITE_FILE | (TRUNCATE if abi >= 3 else 0))):
        pfd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        rule = _PathBeneath(access, pfd)
        if libc.syscall(add_rule, fd, RULE_PATH_BENEATH, ctypes.byref(rule), ctypes.c_uint32(0)) != 0:
            raise OSError(ctypes.get_errno(), f"landlock_add_rule {path}: {os.strerror(ctypes.get_errno())}")
        os.close(pfd)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 or libc.syscall(restrict, fd, ctypes.c_uint32(0)) != 0:
        raise OSError(ctypes.get_errno(), f"landlock_restrict_self: {os.strerror(ctypes.get_errno())}")
    os.close(fd)
    return abi
