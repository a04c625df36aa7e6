"""A seccomp-bpf filter that stops a process, and everything it starts, from creating processes or
running programs: fork, vfork, execve and execveat fail with EPERM, clone fails unless it makes a
thread, clone3 reports ENOSYS (so libc falls back to clone). Threads keep working; a fork bomb cannot
start. x86-64 only; elsewhere `forbid_new_processes` returns False and the audit hook remains."""

from __future__ import annotations

import ctypes
import errno
import platform

AUDIT_ARCH_X86_64 = 0xC000003E
NR = {"fork": 57, "vfork": 58, "execve": 59, "execveat": 322, "clone3": 435, "clone": 56}
CLONE_THREAD = 0x00010000
LD_ABS, JEQ, JSET, RET = 0x20, 0x15, 0x45, 0x06
ALLOW, ERRNO = 0x7FFF0000, 0x00050000
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2


class _Insn(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _Prog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(_Insn))]


def program() -> list[tuple[int, int, int, int]]:
    """(code, jt, jf, k) instructions; jumps count instructions skipped."""
    allow, eperm, enosys = 12, 13, 14  # indices of the three return instructions
    p = [(LD_ABS, 0, 0, 4)]                                    # 0: arch
    p.append((JEQ, 0, allow - 2, AUDIT_ARCH_X86_64))           # 1: other arch -> allow
    p.append((LD_ABS, 0, 0, 0))                                # 2: syscall number
    for i, name in enumerate(("fork", "vfork", "execve", "execveat")):
        here = 3 + i
        p.append((JEQ, eperm - here - 1, 0, NR[name]))         # 3-6
    p.append((JEQ, enosys - 7 - 1, 0, NR["clone3"]))           # 7
    p.append((JEQ, 0, allow - 8 - 1, NR["clone"]))             # 8: not clone -> allow
    p.append((LD_ABS, 0, 0, 16))                               # 9: clone flags (low 32 bits)
    p.append((JSET, allow - 10 - 1, eperm - 10 - 1, CLONE_THREAD))  # 10: thread -> allow
    p.append((RET, 0, 0, ALLOW))                               # 11 (unreached, keeps indices simple)
    p.append((RET, 0, 0, ALLOW))                               # 12
    p.append((RET, 0, 0, ERRNO | errno.EPERM))                 # 13
    p.append((RET, 0, 0, ERRNO | errno.ENOSYS))                # 14
    return p


def forbid_new_processes() -> bool:
    if platform.machine() != "x86_64":
        return False
    insns = program()
    arr = (_Insn * len(insns))(*[_Insn(*i) for i in insns])
    prog = _Prog(len(insns), ctypes.cast(arr, ctypes.POINTER(_Insn)))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return False
    return libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) == 0
