"""File operations that stay inside a workspace at the moment they happen.

Treadle's own file work in a workspace (the file editor, snapshot restore) runs in Treadle's
process, with its rights, while a sandboxed agent may be changing the same folders. Checking a
path (``Workspace.resolve``) and opening it later by name leaves a window in which a folder can
be swapped for a symlink to the host (``renameat2(RENAME_EXCHANGE)``), and the open then lands
outside. So every operation here starts from an open descriptor of the workspace folder and
walks the rest with ``openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)``:
the kernel refuses any step that leaves the folder or meets a symlink, at the moment of the
open. The caller resolves symlinks first (``Workspace.resolve``, which refuses links leading
out) and hands over the real relative path; a link swapped in after that check makes the open
fail (``PathChanged``), never escape.

Only regular files are read or written: a file is opened with ``O_NONBLOCK`` (a FIFO cannot
block the open) and ``fstat``-ed before anything is read, so a FIFO, socket or device is
refused at once (``NotARegularFile``). Files and folders made here are given the workspace
folder's owner (when this process may), so that a root server's edits belong to the
workspace's user.

Needs Linux 5.6 or later (openat2); elsewhere ``ConfinementUnavailable`` says so, and no
weaker path is taken.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import platform
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from treadle.files import read_bounded
from treadle.runtime.workspace.base import WorkspaceError, WorkspacePathError

O_PATH = getattr(os, "O_PATH", 0o10000000)

RESOLVE_NO_XDEV = 0x01
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08
CONFINED = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS
"""How every path below the workspace descriptor is walked."""

_OPENAT2 = {"x86_64": 437, "aarch64": 437, "armv7l": 437, "riscv64": 437, "ppc64le": 437}
"""openat2's syscall number by machine (437 wherever the generic table is used)."""

_EAGAIN_RETRIES = 8
"""openat2 answers EAGAIN when a rename raced the walk; it is tried again this often."""


class ConfinementUnavailable(WorkspaceError):
    """This kernel or machine has no openat2: confined file operations cannot run here."""


class ConfinedPathError(WorkspacePathError):
    """A confined operation was refused (the model is told why)."""


class PathChanged(ConfinedPathError):
    """A path met a symlink or left the workspace while it was opened: it changed after the
    check (or a link was put in its way)."""


class PathMissing(ConfinedPathError):
    """The path (or a folder on the way) does not exist."""


class NotARegularFile(ConfinedPathError):
    """A FIFO, socket, device or folder where a regular file is read or written."""


class _OpenHow(ctypes.Structure):
    _fields_ = [
        ("flags", ctypes.c_uint64),
        ("mode", ctypes.c_uint64),
        ("resolve", ctypes.c_uint64),
    ]


_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long
_checked: bool | None = None


def _openat2_number() -> int:
    number = _OPENAT2.get(platform.machine())
    if number is None or not platform.system() == "Linux":
        raise ConfinementUnavailable(
            f"confined file operations need Linux's openat2, and this machine "
            f"({platform.system()} {platform.machine()}) is not one Treadle knows it on; "
            "the file editor and snapshot restore cannot run here"
        )
    return number


def openat2(dirfd: int, path: str, flags: int, mode: int = 0, resolve: int = CONFINED) -> int:
    """``openat2(dirfd, path, {flags | O_CLOEXEC, mode, resolve})``: a new descriptor, or
    ``OSError`` with the kernel's errno (EXDEV: it would leave ``dirfd``; ELOOP: a symlink)."""
    global _checked
    number = _openat2_number()
    how = _OpenHow(flags | os.O_CLOEXEC, mode, resolve)
    encoded = os.fsencode(path)
    for _attempt in range(_EAGAIN_RETRIES):
        fd = _syscall(
            ctypes.c_long(number),
            ctypes.c_int(dirfd),
            ctypes.c_char_p(encoded),
            ctypes.byref(how),
            ctypes.c_size_t(ctypes.sizeof(how)),
        )
        if fd >= 0:
            _checked = True
            return int(fd)
        code = ctypes.get_errno()
        if code == errno.EAGAIN:
            continue
        if code == errno.ENOSYS:
            raise ConfinementUnavailable(
                "this kernel has no openat2 (Linux 5.6 or later is needed): the file editor "
                "and snapshot restore refuse to run rather than open paths unconfined"
            )
        raise OSError(code, os.strerror(code), path)
    raise OSError(errno.EAGAIN, "the path kept changing while it was opened", path)


def check_available() -> None:
    """``ConfinementUnavailable`` unless openat2 works here (tried once per process)."""
    global _checked
    if _checked:
        return
    try:
        fd = openat2(-100, "/", os.O_RDONLY | os.O_DIRECTORY, resolve=0)  # AT_FDCWD
    except PermissionError:
        # A container's seccomp profile that predates openat2 answers EPERM for it.
        raise ConfinementUnavailable(
            "openat2 is refused here (EPERM: a container's seccomp profile that predates it?): "
            "the file editor and snapshot restore refuse to run rather than open paths "
            "unconfined; allow openat2 (Docker 20.10 or later) or run on the host"
        ) from None
    os.close(fd)


@dataclass(frozen=True)
class Entry:
    """One folder entry, as seen without following it."""

    name: str
    kind: str
    """``file``, ``dir``, ``link`` or ``other``."""


class ConfinedRoot:
    """An open workspace folder; every path given is relative to it (a ``PurePosixPath``
    or text without ``..``: the real path ``Workspace.resolve`` gave, made relative).

    Use as a context manager: the folder's descriptor is closed at the end."""

    def __init__(self, root: str | Path) -> None:
        check_available()
        self.root = Path(root)
        try:
            # O_NOFOLLOW: the folder itself swapped for a link is refused, not followed.
            self._fd = os.open(self.root, O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as error:
            raise ConfinedPathError(
                f"the workspace folder {self.root} cannot be opened: {error.strerror}"
            ) from None
        info = os.fstat(self._fd)
        self.owner = (info.st_uid, info.st_gid)
        """Who owns the workspace folder: files made here are given to them."""

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self._fd)

    def __enter__(self) -> ConfinedRoot:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # -- walking ------------------------------------------------------------------------

    def _relative(self, path: str | PurePosixPath) -> PurePosixPath:
        relative = PurePosixPath(path)
        if relative.is_absolute() or ".." in relative.parts or "\0" in str(relative):
            raise ConfinedPathError(
                f"{str(path)!r} is not a plain path inside the workspace (absolute, '..' or NUL)"
            )
        return relative

    def _open(self, path: str | PurePosixPath, flags: int, mode: int = 0) -> int:
        relative = self._relative(path)
        try:
            return openat2(self._fd, str(relative) if relative.parts else ".", flags, mode)
        except OSError as error:
            raise _refusal(error, relative) from None

    @contextlib.contextmanager
    def _parent(self, path: str | PurePosixPath) -> Iterator[tuple[int, str]]:
        """The open parent folder of ``path`` and its last component."""
        relative = self._relative(path)
        if not relative.parts:
            raise ConfinedPathError("the workspace folder itself is not a file")
        fd = self._open(relative.parent, O_PATH | os.O_DIRECTORY)
        try:
            yield fd, relative.name
        finally:
            os.close(fd)

    # -- asking -------------------------------------------------------------------------

    def lstat(self, path: str | PurePosixPath) -> os.stat_result | None:
        """What ``path`` is (a symlink not followed); None when it does not exist."""
        relative = self._relative(path)
        if not relative.parts:
            return os.fstat(self._fd)
        try:
            with self._parent(relative) as (parent, name):
                return os.stat(name, dir_fd=parent, follow_symlinks=False)
        except (FileNotFoundError, PathMissing):
            return None

    def entries(self, path: str | PurePosixPath) -> list[Entry]:
        """The entries of folder ``path``, sorted by name (links not followed)."""
        fd = self._open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            found: list[Entry] = []
            with os.scandir(fd) as scan:
                for item in scan:
                    if item.is_symlink():
                        kind = "link"
                    elif item.is_dir(follow_symlinks=False):
                        kind = "dir"
                    elif item.is_file(follow_symlinks=False):
                        kind = "file"
                    else:
                        kind = "other"
                    found.append(Entry(item.name, kind))
        finally:
            os.close(fd)
        return sorted(found, key=lambda entry: entry.name)

    # -- reading ------------------------------------------------------------------------

    def open_regular(self, path: str | PurePosixPath) -> int:
        """A read-only descriptor of the regular file ``path`` (the caller closes it);
        ``NotARegularFile`` for anything else, never a blocked open."""
        fd = self._open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
        try:
            self._regular(fd, path)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def read(self, path: str | PurePosixPath, max_bytes: int) -> bytes:
        """The bytes of the regular file ``path``; ``NotARegularFile`` for anything else,
        ``ConfinedPathError`` when it is larger than ``max_bytes``."""
        fd = self.open_regular(path)
        try:
            return read_bounded(fd, str(path), max_bytes, ConfinedPathError)
        finally:
            os.close(fd)

    # -- changing -----------------------------------------------------------------------

    def write(
        self,
        path: str | PurePosixPath,
        data: bytes,
        *,
        create: bool = True,
        exclusive: bool = False,
        mode: int = 0o644,
        chmod: bool = False,
    ) -> None:
        """Write ``data`` as the whole content of regular file ``path`` (made when missing and
        ``create``; ``exclusive``: only when missing). A new file gets ``mode`` and the
        workspace's owner; an existing one keeps its owner, and its mode unless ``chmod``."""
        flags = os.O_WRONLY | os.O_NONBLOCK | os.O_NOFOLLOW
        if create:
            flags |= os.O_CREAT
        if exclusive:
            flags |= os.O_CREAT | os.O_EXCL
        with self._parent(path) as (parent, name):
            existed = _exists(name, parent)
            try:
                # The last step is one name in an open folder: O_NOFOLLOW refuses a link there.
                fd = os.open(name, flags | os.O_CLOEXEC, mode & 0o777, dir_fd=parent)
            except OSError as error:
                raise _refusal(error, self._relative(path)) from None
            try:
                self._regular(fd, path)
                if not existed:
                    self._give(fd)
                if chmod:
                    os.fchmod(fd, mode & 0o777)  # never a setuid or setgid bit
                # Written over, then cut to length, only once known to be a regular file
                # (O_TRUNC at open would apply to whatever the name was at that moment; and
                # ext4 flushes a file truncated to zero and rewritten, 2-3 ms a call).
                view = memoryview(data)
                while view:
                    written = os.write(fd, view)
                    view = view[written:]
                os.ftruncate(fd, len(data))
            finally:
                os.close(fd)

    def symlink(self, path: str | PurePosixPath, target: str) -> None:
        """Make ``path`` a symlink to ``target`` (whatever was there, if a file or link, is
        replaced). The link is only made, never followed here."""
        with self._parent(path) as (parent, name):
            with contextlib.suppress(FileNotFoundError):
                info = os.stat(name, dir_fd=parent, follow_symlinks=False)
                if stat.S_ISDIR(info.st_mode):
                    raise ConfinedPathError(f"{path} is a folder: a link cannot replace it")
                os.unlink(name, dir_fd=parent)
            os.symlink(target, name, dir_fd=parent)
            if os.geteuid() == 0:
                with contextlib.suppress(OSError):
                    os.chown(name, *self.owner, dir_fd=parent, follow_symlinks=False)

    def unlink(self, path: str | PurePosixPath, *, missing_ok: bool = True) -> bool:
        """Remove the file or link ``path`` (never a folder, never what a link names):
        whether something was removed."""
        with self._parent(path) as (parent, name):
            try:
                os.unlink(name, dir_fd=parent)
            except FileNotFoundError:
                if not missing_ok:
                    raise ConfinedPathError(f"{path} does not exist") from None
                return False
            except IsADirectoryError:
                raise NotARegularFile(f"{path} is a folder, not a file") from None
            except OSError as error:
                if error.errno == errno.EISDIR or error.errno == errno.EPERM:
                    raise NotARegularFile(f"{path} is a folder, not a file") from None
                raise
            return True

    def rmdir(self, path: str | PurePosixPath) -> bool:
        """Remove folder ``path`` if empty: whether it was removed."""
        with self._parent(path) as (parent, name):
            try:
                os.rmdir(name, dir_fd=parent)
            except OSError:
                return False
            return True

    def mkdirs(self, path: str | PurePosixPath, mode: int = 0o755) -> None:
        """Make folder ``path`` and its missing parents, each given the workspace's owner;
        a file or link in the way is refused."""
        relative = self._relative(path)
        current = PurePosixPath()
        for part in relative.parts:
            current = current / part
            with self._parent(current) as (parent, name):
                try:
                    os.mkdir(name, mode, dir_fd=parent)
                except FileExistsError:
                    info = os.stat(name, dir_fd=parent, follow_symlinks=False)
                    if not stat.S_ISDIR(info.st_mode):
                        raise ConfinedPathError(
                            f"{current} is not a folder (a file or link is in the way)"
                        ) from None
                    continue
                if os.geteuid() == 0:
                    with contextlib.suppress(OSError):
                        os.chown(name, *self.owner, dir_fd=parent, follow_symlinks=False)

    # -- helpers ------------------------------------------------------------------------

    def _regular(self, fd: int, path: str | PurePosixPath) -> os.stat_result:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise NotARegularFile(f"{path} is a folder, not a file")
        if not stat.S_ISREG(info.st_mode):
            raise NotARegularFile(
                f"{path} is a {_kind(info.st_mode)}, not a regular file: the file editor reads "
                "and writes regular files only (use the terminal for anything else)"
            )
        # Clear O_NONBLOCK now that it is known to be a file (it matters only for FIFOs).
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        return info

    def _give(self, fd: int) -> None:
        """A file made here belongs to the workspace's owner (root may give it)."""
        if os.geteuid() == 0 and (os.getuid(), os.getgid()) != self.owner:
            with contextlib.suppress(OSError):
                os.fchown(fd, *self.owner)


def _exists(name: str, parent: int) -> bool:
    try:
        os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "FIFO"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISCHR(mode):
        return "character device"
    if stat.S_ISBLK(mode):
        return "block device"
    return "special file"


def _refusal(error: OSError, path: PurePosixPath) -> ConfinedPathError:
    """The agent's error for a refused open."""
    shown = str(path) or "."
    if error.errno in (errno.ELOOP, errno.EXDEV):
        return PathChanged(
            f"{shown} met a symlink or left the workspace while it was opened (it changed after "
            "it was checked, or a link is in its way): refused; try again with a real path"
        )
    if error.errno == errno.ENOENT:
        return PathMissing(f"{shown} does not exist")
    if error.errno == errno.ENXIO:  # a FIFO opened for writing with no reader
        return NotARegularFile(f"{shown} is a FIFO or socket, not a regular file")
    if error.errno == errno.ENOTDIR:
        return ConfinedPathError(f"a part of {shown} is not a folder")
    if error.errno == errno.EISDIR:
        return NotARegularFile(f"{shown} is a folder, not a file")
    if error.errno == errno.EEXIST:
        return ConfinedPathError(f"{shown} already exists")
    return ConfinedPathError(f"{shown} cannot be opened: {error.strerror}")
