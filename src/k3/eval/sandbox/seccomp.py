"""A seccomp-bpf filter for the sandbox child and everything it starts.

- Any syscall made through another ABI (i386 `int 0x80`, x32) kills the process: the filter only
  understands x86-64 numbers, so a foreign ABI must not get through unchecked.
- No new processes or programs: fork, vfork, execve, execveat fail with EPERM, clone fails unless it
  makes a thread, clone3 reports ENOSYS (libc then falls back to clone). Threads keep working.
- No leaving the run's process group (setsid, setpgid): killing the group reaches every process.
- No signals to other processes: kill and tgkill only to itself (pid 0 or its own pid), tkill,
  rt_(tg)sigqueueinfo, the pidfd calls, ptrace and process_vm_* fail with EPERM.
- No way out of the namespaces or into the kernel's larger surfaces: unshare, setns, mount and the
  new mount API, chroot, pivot_root, bpf, perf_event_open, userfaultfd, io_uring, keyrings.
- No memory outside the address-space limit: RLIMIT_AS counts only what a process maps, so memfds
  (memfd_create, memfd_secret), System V shared memory and message queues, and file descriptors
  parked in a unix socket (sendmsg with SCM_RIGHTS; plain send and sendto stay) are refused.
- Sockets only of the families a program in the sandbox needs: unix (asyncio's self-pipe), IPv4
  and IPv6 (inside an empty network namespace: loopback at most). Others (vsock, netlink, packet,
  bluetooth, ...) fail with EAFNOSUPPORT, as on a kernel built without them.

Written with symbolic jump targets (`_Program`) so that adding a rule cannot break the jump arithmetic.
x86-64 only; elsewhere `install` returns False and the report says the layer is missing."""

from __future__ import annotations

import ctypes
import errno
import os
import platform

AUDIT_ARCH_X86_64 = 0xC000003E
X32_SYSCALL_BIT = 0x40000000
NR = {"fork": 57, "vfork": 58, "execve": 59, "execveat": 322, "clone": 56, "clone3": 435, "kill": 62,
      "tgkill": 234}
DENIED = {"tkill": 200, "rt_sigqueueinfo": 129, "rt_tgsigqueueinfo": 297, "ptrace": 101,
          "process_vm_readv": 310, "process_vm_writev": 311, "process_madvise": 440, "kcmp": 312,
          "pidfd_open": 434, "pidfd_send_signal": 424, "pidfd_getfd": 438,
          "unshare": 272, "setns": 308, "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161,
          "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
          "mount_setattr": 442, "bpf": 321, "perf_event_open": 298, "userfaultfd": 323,
          "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
          "keyctl": 250, "add_key": 248, "request_key": 249,
          "memfd_create": 319, "memfd_secret": 447, "sendmsg": 46, "sendmmsg": 307,
          "shmget": 29, "shmat": 30, "shmctl": 31, "msgget": 68, "msgsnd": 69, "mq_open": 240,
          "setsid": 112, "setpgid": 109}
SOCKETS = {"socket": 41, "socketpair": 53}
FAMILIES = (1, 2, 10)   # AF_UNIX, AF_INET, AF_INET6
CLONE_THREAD = 0x00010000
LD_W_ABS, JEQ, JGE, JSET, RET = 0x20, 0x15, 0x35, 0x45, 0x06
KILL_PROCESS, ALLOW, ERRNO = 0x80000000, 0x7FFF0000, 0x00050000
OFF_NR, OFF_ARCH, OFF_ARG0 = 0, 4, 16          # struct seccomp_data; args are u64, low half first
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2


class _Program:
    """BPF instructions whose jumps name labels; `assemble` turns them into relative offsets."""

    def __init__(self):
        self.insns: list[tuple[int, str | int, str | int, int]] = []
        self.labels: dict[str, int] = {}

    def load(self, offset: int) -> None:
        self.insns.append((LD_W_ABS, 0, 0, offset))

    def jump(self, op: int, k: int, true: str | int = 0, false: str | int = 0) -> None:
        """Jump to label `true`/`false` (0: fall through to the next instruction)."""
        self.insns.append((op, true, false, k))

    def ret(self, label: str, value: int) -> None:
        """A return instruction, which jumps may name (jumps go forward only)."""
        self.labels[label] = len(self.insns)
        self.insns.append((RET, 0, 0, value))

    def mark(self, label: str) -> None:
        self.labels[label] = len(self.insns)

    def assemble(self) -> list[tuple[int, int, int, int]]:
        out = []
        for i, (code, jt, jf, k) in enumerate(self.insns):
            rel = [0 if t == 0 else self.labels[t] - i - 1 for t in (jt, jf)]
            if min(rel) < 0 or max(rel) > 255:
                raise ValueError(f"seccomp jump out of range at {i}: {rel}")
            out.append((code, rel[0], rel[1], k))
        return out


PROCESS_CALLS = ("fork", "vfork", "execve", "execveat")
GROUP_CALLS = ("setsid", "setpgid")


def program(own_pid: int, signal_to: int | None = None, processes: bool = False) -> list[tuple[int, int, int, int]]:
    """(code, jt, jf, k) instructions. `own_pid` is the process kill/tgkill may signal, and `signal_to` one more
    (the judge's worker, which the judge kills when its check is done). `processes` (Sandbox.exec, always in a
    PID namespace of its own): fork, exec, sessions and signals are allowed; every other rule holds."""
    p = _Program()
    p.load(OFF_ARCH)
    p.jump(JEQ, AUDIT_ARCH_X86_64, false="kill")
    p.load(OFF_NR)
    p.jump(JGE, X32_SYSCALL_BIT, true="kill")
    denied = [n for n in DENIED if not (processes and n in GROUP_CALLS)]
    for name in (() if processes else PROCESS_CALLS) + tuple(denied):
        p.jump(JEQ, NR.get(name) or DENIED[name], true="eperm")
    if not processes:
        p.jump(JEQ, NR["clone3"], true="enosys")
        p.jump(JEQ, NR["clone"], true="clone")
        p.jump(JEQ, NR["kill"], true="signal")
        p.jump(JEQ, NR["tgkill"], true="signal")
    p.jump(JEQ, SOCKETS["socket"], true="family")
    p.jump(JEQ, SOCKETS["socketpair"], true="family")
    p.ret("no-rule", ALLOW)
    p.mark("family")                            # socket(domain, ...) / socketpair(domain, ...): arg0 is the family
    p.load(OFF_ARG0)
    for family in FAMILIES:
        p.jump(JEQ, family, true="allow")
    p.jump(JEQ, 0, true="eafnosupport", false="eafnosupport")
    p.mark("clone")
    p.load(OFF_ARG0)
    p.jump(JSET, CLONE_THREAD, true="allow", false="eperm")
    p.mark("signal")                            # kill(pid, sig) / tgkill(tgid, tid, sig): arg0 is the process
    p.load(OFF_ARG0)
    p.jump(JEQ, own_pid, true="allow")
    if signal_to:
        p.jump(JEQ, signal_to, true="allow")
    p.jump(JEQ, 0, true="allow", false="eperm")
    p.ret("allow", ALLOW)
    p.ret("eperm", ERRNO | errno.EPERM)
    p.ret("enosys", ERRNO | errno.ENOSYS)
    p.ret("eafnosupport", ERRNO | errno.EAFNOSUPPORT)
    p.ret("kill", KILL_PROCESS)
    return p.assemble()


class _Insn(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _Prog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(_Insn))]


def install(signal_to: int | None = None, processes: bool = False) -> bool:
    """Load the filter into this process (irreversible; inherited by every thread and process it starts)."""
    if platform.machine() != "x86_64":
        return False
    insns = program(os.getpid(), signal_to, processes)
    arr = (_Insn * len(insns))(*[_Insn(*i) for i in insns])
    prog = _Prog(len(insns), ctypes.cast(arr, ctypes.POINTER(_Insn)))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return False
    return libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) == 0

