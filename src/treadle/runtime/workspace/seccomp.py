"""The sandbox's seccomp filter: a classic BPF program, built here with ``struct``, that bubblewrap
loads (``--seccomp FD``) into every process of the sandbox before its command starts.

What it refuses, beside what dropped capabilities and namespaces already stop (a second lock on
the same doors, and the doors they leave open):

- **setuid and setgid files**: chmod, fchmod, fchmodat, fchmodat2, creat, mkdir, mkdirat, mknod,
  mknodat, and open/openat creating a file (``O_CREAT`` or ``O_TMPFILE``), whose mode has
  ``S_ISUID`` or ``S_ISGID``, answer EPERM. ``openat2`` answers ENOSYS (its mode lies in a struct
  that seccomp cannot read), so libc falls back to openat; ``clone3`` likewise (its flags are in a
  struct: a new user namespace could hide there) and libc falls back to clone.
- **the kernel's other surfaces**: keyrings (keyctl, add_key, request_key), io_uring (it runs
  system calls the filter never sees), mounts of every API, ptrace and reading or writing another
  process's memory, kernel modules, kexec, bpf, perf events, userfaultfd, namespaces (setns;
  unshare and clone asking for a user namespace), the clock, swap, reboot, quotas, the kernel
  log, file handles, and faking terminal input (TIOCSTI, TIOCLINUX ioctls): EPERM.
- **another ABI**: a system call of another architecture (e.g. i386's ``int 0x80``) kills the
  process; one of the x32 ABI (bit 0x40000000 of its number) answers EPERM. The numbers are
  x86_64's only: ``SeccompUnsupported`` refuses any other machine rather than run a weaker sandbox.
"""

from __future__ import annotations

import errno
import fcntl
import functools
import os
import platform
import struct
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from treadle.runtime.workspace.base import SandboxUnavailable

# Classic BPF opcodes (linux/filter.h) and seccomp's return values (linux/seccomp.h).
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JSET_K = 0x45
_RET_K = 0x06
_RET_KILL_PROCESS = 0x80000000
_RET_ERRNO = 0x00050000
_RET_ALLOW = 0x7FFF0000

# struct seccomp_data: nr (u32), arch (u32), instruction_pointer (u64), args[6] (u64 each).
_NR_OFFSET = 0
_ARCH_OFFSET = 4


def _arg_low(index: int) -> int:
    """Offset of the low 32 bits of argument ``index`` (little endian): where a mode, a flag
    word or an ioctl request lies."""
    return 16 + 8 * index


AUDIT_ARCH_X86_64 = 0xC000003E
X32_SYSCALL_BIT = 0x40000000
SETID_BITS = 0o6000
"""S_ISUID | S_ISGID."""
O_CREAT = 0o100
O_TMPFILE_BIT = 0o20000000
"""``__O_TMPFILE``: O_TMPFILE is this with O_DIRECTORY, and makes a file as O_CREAT does."""
CLONE_NEWUSER = 0x10000000
TIOCSTI = 0x5412
TIOCLINUX = 0x541C

# x86_64 system call numbers (arch/x86/entry/syscalls/syscall_64.tbl).
X86_64 = {
    "open": 2,
    "ioctl": 16,
    "clone": 56,
    "fchmod": 91,
    "chmod": 90,
    "mkdir": 83,
    "creat": 85,
    "ptrace": 101,
    "syslog": 103,
    "uselib": 134,
    "mknod": 133,
    "vhangup": 153,
    "pivot_root": 155,
    "_sysctl": 156,
    "adjtimex": 159,
    "acct": 163,
    "settimeofday": 164,
    "mount": 165,
    "umount2": 166,
    "swapon": 167,
    "swapoff": 168,
    "reboot": 169,
    "iopl": 172,
    "ioperm": 173,
    "create_module": 174,
    "init_module": 175,
    "delete_module": 176,
    "get_kernel_syms": 177,
    "query_module": 178,
    "quotactl": 179,
    "nfsservctl": 180,
    "lookup_dcookie": 212,
    "clock_settime": 227,
    "kexec_load": 246,
    "add_key": 248,
    "request_key": 249,
    "keyctl": 250,
    "openat": 257,
    "mkdirat": 258,
    "mknodat": 259,
    "fchmodat": 268,
    "unshare": 272,
    "perf_event_open": 298,
    "fanotify_init": 300,
    "name_to_handle_at": 303,
    "open_by_handle_at": 304,
    "clock_adjtime": 305,
    "setns": 308,
    "process_vm_readv": 310,
    "process_vm_writev": 311,
    "kcmp": 312,
    "finit_module": 313,
    "kexec_file_load": 320,
    "bpf": 321,
    "userfaultfd": 323,
    "io_uring_setup": 425,
    "io_uring_enter": 426,
    "io_uring_register": 427,
    "open_tree": 428,
    "move_mount": 429,
    "fsopen": 430,
    "fsconfig": 431,
    "fsmount": 432,
    "fspick": 433,
    "clone3": 435,
    "openat2": 437,
    "pidfd_getfd": 438,
    "process_madvise": 440,
    "mount_setattr": 442,
    "quotactl_fd": 443,
    "fchmodat2": 452,
}

DENIED = (
    "keyctl", "add_key", "request_key",
    "io_uring_setup", "io_uring_enter", "io_uring_register",
    "mount", "umount2", "pivot_root", "open_tree", "move_mount", "fsopen", "fsconfig",
    "fsmount", "fspick", "mount_setattr",
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd", "process_madvise",
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
    "create_module", "get_kernel_syms", "query_module", "uselib", "nfsservctl", "_sysctl",
    "bpf", "perf_event_open", "userfaultfd", "fanotify_init", "lookup_dcookie",
    "setns",
    "settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
    "swapon", "swapoff", "reboot", "acct", "quotactl", "quotactl_fd", "syslog", "vhangup",
    "iopl", "ioperm", "name_to_handle_at", "open_by_handle_at",
)  # fmt: skip
"""Refused outright (EPERM)."""

NOT_IMPLEMENTED = ("openat2", "clone3")
"""Answered ENOSYS: their arguments lie in structs seccomp cannot read; libc falls back to
openat and clone, whose arguments the filter checks."""

MODE_ARGUMENT = {
    "chmod": 1,
    "fchmod": 1,
    "fchmodat": 2,
    "fchmodat2": 2,
    "creat": 1,
    "mkdir": 1,
    "mkdirat": 2,
    "mknod": 1,
    "mknodat": 2,
}
"""System calls whose mode (argument index) may not carry S_ISUID or S_ISGID."""

CREATING_OPEN = {"open": (1, 2), "openat": (2, 3)}
"""open calls: (flags argument, mode argument). The mode counts only when the flags create a
file (the register holds whatever the caller left there otherwise)."""

FLAG_ARGUMENT = {"unshare": (0, CLONE_NEWUSER), "clone": (0, CLONE_NEWUSER)}
"""System calls refused when a flag argument has these bits: a new user namespace (bubblewrap's
--disable-userns stops it too; this is the second lock)."""

IOCTL_REQUESTS = (TIOCSTI, TIOCLINUX)
"""ioctl requests refused: typing into a terminal, and the console's own controls."""


class SeccompUnsupported(SandboxUnavailable):
    """The filter cannot be built for this machine (another architecture)."""


@dataclass(frozen=True)
class _Jump:
    """A conditional jump to labels (or to the next instruction: None)."""

    code: int
    k: int
    true: str | None
    false: str | None = None


_Instruction = tuple[int, int] | _Jump | str
"""(code, k) for a load or return, a ``_Jump``, or a label marking the next instruction."""


def _assemble(program: Sequence[_Instruction]) -> bytes:
    """The program as ``struct sock_filter`` entries, labels resolved to forward offsets."""
    labels: dict[str, int] = {}
    position = 0
    for item in program:
        if isinstance(item, str):
            labels[item] = position
        else:
            position += 1
    out = bytearray()
    position = 0
    for item in program:
        if isinstance(item, str):
            continue
        if isinstance(item, _Jump):
            offsets = []
            for label in (item.true, item.false):
                offset = 0 if label is None else labels[label] - position - 1
                if not 0 <= offset <= 255:  # classic BPF jumps forward, at most 255 steps
                    raise ValueError(f"seccomp filter: jump to {label} out of range ({offset})")
                offsets.append(offset)
            out += struct.pack("<HBBI", item.code, offsets[0], offsets[1], item.k)
        else:
            out += struct.pack("<HBBI", item[0], 0, 0, item[1])
        position += 1
    return bytes(out)


def build_program(numbers: dict[str, int] = X86_64, arch: int = AUDIT_ARCH_X86_64) -> bytes:
    """The filter for one architecture (its audit value and system call numbers)."""
    program: list[_Instruction] = [
        (_LD_W_ABS, _ARCH_OFFSET),
        _Jump(_JEQ_K, arch, None, "kill"),
        (_LD_W_ABS, _NR_OFFSET),
        _Jump(_JSET_K, X32_SYSCALL_BIT, "deny"),
    ]
    program += [_Jump(_JEQ_K, numbers[name], "deny") for name in DENIED]
    program += [_Jump(_JEQ_K, numbers[name], "enosys") for name in NOT_IMPLEMENTED]
    checked = [*MODE_ARGUMENT, *CREATING_OPEN, *FLAG_ARGUMENT, "ioctl"]
    program += [_Jump(_JEQ_K, numbers[name], f"check_{name}") for name in checked]
    program.append((_RET_K, _RET_ALLOW))
    for name, index in MODE_ARGUMENT.items():
        program += [f"check_{name}", (_LD_W_ABS, _arg_low(index))]
        program += [_Jump(_JSET_K, SETID_BITS, "deny", "allow")]
    for name, (flags, mode) in CREATING_OPEN.items():
        program += [f"check_{name}", (_LD_W_ABS, _arg_low(flags))]
        program += [_Jump(_JSET_K, O_CREAT | O_TMPFILE_BIT, None, "allow")]
        program += [(_LD_W_ABS, _arg_low(mode)), _Jump(_JSET_K, SETID_BITS, "deny", "allow")]
    for name, (index, bits) in FLAG_ARGUMENT.items():
        program += [f"check_{name}", (_LD_W_ABS, _arg_low(index))]
        program += [_Jump(_JSET_K, bits, "deny", "allow")]
    program += ["check_ioctl", (_LD_W_ABS, _arg_low(1))]
    program += [_Jump(_JEQ_K, request, "deny") for request in IOCTL_REQUESTS]
    program += ["allow", (_RET_K, _RET_ALLOW)]
    program += ["deny", (_RET_K, _RET_ERRNO | errno.EPERM)]
    program += ["enosys", (_RET_K, _RET_ERRNO | errno.ENOSYS)]
    program += ["kill", (_RET_K, _RET_KILL_PROCESS)]
    return _assemble(program)


SUPPORTED_MACHINES = ("x86_64",)


@functools.cache
def filter_program() -> bytes:
    """This machine's filter; ``SeccompUnsupported`` on a machine it has no numbers for."""
    machine = platform.machine()
    if machine not in SUPPORTED_MACHINES:
        raise SeccompUnsupported(
            f"the sandbox's seccomp filter knows the system calls of "
            f"{', '.join(SUPPORTED_MACHINES)} only, not {machine}: Treadle will not run a "
            "weaker sandbox; run it on x86_64, or explicitly with --sandbox none"
        )
    return build_program()


_memfd: dict[int, int] = {}
"""This process's sealed in-memory copy of the filter: its descriptor, by pid (a forked child
makes its own: the path names the process)."""
_memfd_lock = threading.Lock()
_SEALS = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE


def filter_file() -> Path:
    """Where the launcher opens the filter as bubblewrap's ``--seccomp`` descriptor: a sealed
    memfd of this process, reached as ``/proc/PID/fd/N`` (the command that starts a sandbox,
    an MCP server's through the MCP SDK, cannot be handed an open descriptor). Nothing on
    disk; it goes with this process, and nobody can change it (sealed)."""
    program = filter_program()
    pid = os.getpid()
    with _memfd_lock:
        fd = _memfd.get(pid)
        if fd is None:
            fd = os.memfd_create("treadle-seccomp", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
            os.write(fd, program)
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, _SEALS)
            _memfd[pid] = fd
    return Path(f"/proc/{pid}/fd/{fd}")
