"""The content-addressed file store behind workspace snapshots: one private bare git object
store per Treadle store, driven with git plumbing, never the user's own ``.git``.

A snapshot is the id of a git *tree* holding the workspace's files: identical contents give the
same id, an unchanged file costs nothing (its blob is already stored), and a private index per
workspace (``GIT_INDEX_FILE``) keeps the stat of each file so that only changed files are read.
``refs/snapshots/<conversation id in hex>/<tree>`` keep a conversation's snapshots alive; ``gc`` drops
what no ref reaches. The user's git configuration is never read (``GIT_CONFIG_NOSYSTEM``,
``GIT_CONFIG_GLOBAL``), so only the workspace's own ``.gitignore`` files decide what is skipped.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import os
import re
import shutil
import stat
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from treadle.errors import TreadleError
from treadle.runtime.snapshots.fingerprint import fingerprint, now_ns
from treadle.runtime.workspace.confined import ConfinedPathError, ConfinedRoot

DEFAULT_MAX_FILE_BYTES = 10 * 1024 * 1024
"""Files larger than this are not snapshotted (and the snapshot says so)."""
SKIPPED_SHOWN = 100
"""At most this many skipped paths are listed in a snapshot's record (the count is exact)."""
NO_IGNORE_FILE = ".treadle-never-an-ignore-file"
"""The per-folder ignore file's name when the work tree's own ignore files must play no part:
no file of that name is ever read."""
EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
"""git's id of the empty tree (sha1)."""
LOCK_RETRY_DELAYS_S = (0.02, 0.05, 0.1, 0.2, 0.4, 0.8)
"""How long a git command waits for another process's lock on the same index or ref."""
GIT_CONFIG = (
    ("core.autocrlf", "false"),
    ("core.fileMode", "true"),
    ("core.symlinks", "true"),
    ("core.untrackedCache", "true"),
    ("core.preloadIndex", "true"),
    ("core.quotePath", "false"),
    ("gc.auto", "0"),
    ("index.threads", "true"),
)


_TREE_ID = re.compile(r"[0-9a-f]{40}")
"""A tree id as this store's git writes them (SHA-1)."""


class SnapshotError(TreadleError):
    """The snapshot store cannot do what was asked (git missing or failing, unknown id)."""


@dataclass(frozen=True)
class TreeSnapshot:
    """What one ``take`` recorded."""

    id: str
    """The tree id of the workspace's files."""
    files: int
    changed: list[str]
    """Paths added, changed or deleted since the workspace's previous snapshot."""
    bytes_added: int
    """Bytes on disk of the file versions this snapshot stored that the previous did not hold."""
    skipped: list[str] = field(default_factory=list)
    skipped_count: int = 0


@dataclass(frozen=True)
class Change:
    status: str
    """``A`` (the target has it, the current does not), ``M``, ``T`` (type) or ``D``."""
    path: str
    mode: str = "000000"
    """The target's mode and blob id (``000000`` and zeros for ``D``)."""
    blob: str = "0" * 40


@dataclass(frozen=True)
class _Quiet:
    """What a workspace's last snapshot found, to answer the next one without git when the
    work tree's fingerprint has not moved."""

    rules: tuple[object, ...]
    """The ``take`` arguments it was taken with (other rules: git walks again)."""
    skip: frozenset[str]
    """The ignored paths and nested repositories it found (the fingerprint skips them)."""
    fingerprint: bytes | None
    """The work tree's fingerprint just after it (None: not trusted, git walks next time)."""
    index: tuple[int, int, int]
    """The index file's signature then (another writer of the index: git walks again)."""
    taken: TreeSnapshot


class GitSnapshotStore:
    """The object store at ``root`` (created on first use). Thread-safe per workspace."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.git_dir = self.root / "objects.git"
        self._locks: dict[str, threading.Lock] = {}
        self._locks_lock = threading.Lock()
        self._ready = False
        self._git = shutil.which("git")
        self._trees: dict[str, tuple[str, tuple[int, int, int]]] = {}
        """The tree each workspace index held when this object last wrote it, with the index
        file's (inode, size, mtime) then: another writer of the index makes it unknown."""
        self._quiet: dict[str, _Quiet] = {}
        """Per workspace index: what its last snapshot found (see ``fingerprint``)."""

    # -- plumbing ------------------------------------------------------------------------

    def _ensure(self) -> None:
        if self._ready and self.git_dir.is_dir():  # (a folder removed since is made again)
            return
        if self._git is None:
            raise SnapshotError("workspace snapshots need git on PATH; install git")
        # Copies of the workspaces' files: readable by their owner only.
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        (self.root / "indexes").mkdir(parents=True, exist_ok=True)
        (self.root / "excludes").mkdir(parents=True, exist_ok=True)
        if not (self.git_dir / "HEAD").exists():
            self._run(["init", "--bare", "-q", str(self.git_dir)], git_dir=False)
            for key, value in GIT_CONFIG:
                self._run(["config", key, value])
        self._ready = True

    def _env(self, work_tree: Path | None = None, index: Path | None = None) -> dict[str, str]:
        env = {
            # git's own folder only: nothing of this process's environment reaches git.
            "PATH": os.path.dirname(self._git or "/usr/bin/git"),
            "GIT_DIR": str(self.git_dir),
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_TERMINAL_PROMPT": "0",
            "LC_ALL": "C",
        }
        if work_tree is not None:
            env["GIT_WORK_TREE"] = str(work_tree)
        if index is not None:
            env["GIT_INDEX_FILE"] = str(index)
        return env

    def _run(
        self,
        args: Sequence[str],
        *,
        work_tree: Path | None = None,
        index: Path | None = None,
        input: bytes | None = None,
        git_dir: bool = True,
        ok: Iterable[int] = (0,),
    ) -> bytes:
        env = self._env(work_tree, index)
        if not git_dir:
            del env["GIT_DIR"]
        for delay in (*LOCK_RETRY_DELAYS_S, None):
            done = subprocess.run(
                [self._git or "git", *args],
                input=input,
                capture_output=True,
                env=env,
                cwd=str(work_tree or self.root),
                check=False,
            )
            if done.returncode in ok:
                return done.stdout
            message = done.stderr.decode(errors="replace").strip()
            # Another process snapshots the same workspace (two conversations, two servers):
            # git's own lock on the index or a ref says so; wait for it a little.
            if delay is None or ".lock" not in message:
                break
            time.sleep(delay)
        raise SnapshotError(f"git {args[0]} failed in the snapshot store: {message}")

    def _start(
        self, args: Sequence[str], *, work_tree: Path, index: Path
    ) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [self._git or "git", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=self._env(work_tree, index),
            cwd=str(work_tree),
        )

    @staticmethod
    def _finish(process: subprocess.Popen[bytes]) -> bytes:
        out, err = process.communicate()
        if process.returncode != 0:
            message = err.decode(errors="replace").strip()
            raise SnapshotError(f"git ls-files failed in the snapshot store: {message}")
        return out

    def _lock(self, key: str) -> threading.Lock:
        with self._locks_lock:
            return self._locks.setdefault(key, threading.Lock())

    @staticmethod
    def workspace_key(work_tree: Path) -> str:
        return hashlib.sha256(os.fsencode(os.path.realpath(work_tree))).hexdigest()[:24]

    def index_of(self, work_tree: Path) -> Path:
        return self.root / "indexes" / self.workspace_key(work_tree)

    # -- taking ----------------------------------------------------------------------------

    def take(
        self,
        work_tree: Path,
        *,
        previous: str | None = None,
        max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
        never: Sequence[Path] = (),
        extra_skipped: Sequence[str] = (),
        exclude: Sequence[str] = (),
        workspace_ignore_files: bool = True,
    ) -> TreeSnapshot:
        """Record the files of ``work_tree`` (its ``.gitignore``d paths, its ``.git`` and
        files over ``max_file_bytes`` skipped; ``never``: paths never recorded nor touched,
        e.g. the store's own files; ``exclude``: .gitignore patterns skipped as ignored;
        without ``workspace_ignore_files`` the work tree's own ignore files play no part).
        ``previous``: the tree ``changed`` is counted from
        (default: the tree this workspace's index held)."""
        self._ensure()
        work_tree = Path(os.path.realpath(work_tree))
        index = self.index_of(work_tree)
        rules: tuple[object, ...] = (max_file_bytes, tuple(never), tuple(extra_skipped))
        rules += (tuple(exclude), workspace_ignore_files)
        with self._lock(str(index)):
            started = now_ns()
            unchanged = self._unchanged(work_tree, index, rules, started)
            if unchanged is not None:
                return self._since(previous, unchanged)
            self._quiet.pop(str(index), None)  # (a walk that fails leaves nothing to trust)
            skip, taken = self._walk(
                work_tree,
                index,
                previous=previous,
                max_file_bytes=max_file_bytes,
                never=never,
                extra_skipped=extra_skipped,
                exclude=exclude,
                workspace_ignore_files=workspace_ignore_files,
            )
            self._quiet[str(index)] = _Quiet(
                rules=rules,
                skip=skip,
                fingerprint=fingerprint(work_tree, skip, started_ns=started),
                index=_signature(index),
                taken=taken,
            )
            return taken

    def _unchanged(
        self, work_tree: Path, index: Path, rules: tuple[object, ...], started: int
    ) -> TreeSnapshot | None:
        """The workspace's last snapshot when nothing it reads has changed since (None: walk)."""
        quiet = self._quiet.get(str(index))
        if quiet is None or quiet.fingerprint is None or quiet.rules != rules:
            return None
        if quiet.index != _signature(index) or not self.git_dir.is_dir():
            return None
        if fingerprint(work_tree, quiet.skip, started_ns=started) != quiet.fingerprint:
            return None
        return quiet.taken

    def _since(self, previous: str | None, unchanged: TreeSnapshot) -> TreeSnapshot:
        """``unchanged`` as a new snapshot: nothing changed, or (``previous``) what did since."""
        changes = [] if previous in (None, unchanged.id) else self.changes(previous, unchanged.id)
        return dataclasses.replace(
            unchanged,
            changed=[change.path for change in changes],
            bytes_added=self._bytes_added(changes),
            skipped=list(unchanged.skipped),  # (the caller's to change: never the remembered)
        )

    def _walk(
        self,
        work_tree: Path,
        index: Path,
        *,
        previous: str | None,
        max_file_bytes: int,
        never: Sequence[Path],
        extra_skipped: Sequence[str],
        exclude: Sequence[str],
        workspace_ignore_files: bool,
    ) -> tuple[frozenset[str], TreeSnapshot]:
        """``take`` by git's walks: (the ignored paths and nested repositories, the snapshot)."""
        excludes = self._write_excludes(work_tree, never, exclude)
        config = ["-c", f"core.excludesFile={excludes}"]
        if workspace_ignore_files:
            rules = ["--exclude-standard"]
        else:  # the excludes file only: no per-folder ignore file of that name exists
            rules = [f"--exclude-from={excludes}", f"--exclude-per-directory={NO_IGNORE_FILE}"]
        before = previous or self._index_tree(work_tree, index)
        # The two walks of the workspace run side by side: what changed, what is ignored.
        ignoring = self._start(
            [*config, "ls-files", "-z", "-o", "-i", *rules, "--directory"],
            work_tree=work_tree,
            index=index,
        )
        try:
            listed = self._run(
                [*config, "ls-files", "-z", "-m", "-o", "-d", *rules],
                work_tree=work_tree,
                index=index,
            )
        finally:
            ignored = self._finish(ignoring)
        update: list[str] = []
        remove: list[str] = []
        not_walked: set[str] = set()
        skipped = list(extra_skipped)
        for raw in dict.fromkeys(listed.split(b"\0")):
            if not raw:
                continue
            path = os.fsdecode(raw)
            if path.endswith("/"):  # a nested git repository: its files are its own
                skipped.append(f"{path} (a git repository inside the workspace)")
                not_walked.add(path.rstrip("/"))
                continue
            try:
                info = os.lstat(work_tree / path)
            except FileNotFoundError:
                update.append(path)  # deleted: --remove drops it from the index
                continue
            if not (stat.S_ISREG(info.st_mode) or _is_link(info.st_mode)):
                # A FIFO, socket or device: git cannot store it (it would fail the whole
                # snapshot), and a restore never makes one.
                skipped.append(f"{path} (not a regular file)")
                remove.append(path)
                continue
            if info.st_size > max_file_bytes and not _is_link(info.st_mode):
                skipped.append(f"{path} (over {max_file_bytes} bytes)")
                remove.append(path)
                continue
            update.append(path)
        ignored_paths = [os.fsdecode(raw) for raw in ignored.split(b"\0") if raw]
        skipped.extend(f"{path} (ignored)" for path in ignored_paths)
        not_walked.update(path.rstrip("/") for path in ignored_paths)
        if update:
            self._run(
                ["update-index", "--add", "--remove", "-z", "--stdin"],
                work_tree=work_tree,
                index=index,
                input=b"\0".join(os.fsencode(p) for p in update) + b"\0",
            )
        if remove:
            self._run(
                ["update-index", "--force-remove", "-z", "--stdin"],
                work_tree=work_tree,
                index=index,
                input=b"\0".join(os.fsencode(p) for p in remove) + b"\0",
            )
        if update or remove or not index.exists():
            out = self._run(["write-tree"], work_tree=work_tree, index=index)
            self._remember_tree(index, out.decode().strip())
        tree_id = self._index_tree(work_tree, index)
        changes = self.changes(before, tree_id) if before != tree_id else []
        added = self._bytes_added(changes)
        return frozenset(not_walked), TreeSnapshot(
            id=tree_id,
            files=_index_entries(index),
            changed=[change.path for change in changes],
            bytes_added=added,
            skipped=skipped[:SKIPPED_SHOWN],
            skipped_count=len(skipped),
        )

    def _index_tree(self, work_tree: Path, index: Path) -> str:
        """The tree the workspace's index holds (remembered from the last write)."""
        if not index.exists():
            return EMPTY_TREE
        known = self._trees.get(str(index))
        if known is not None and known[1] == _signature(index):
            return known[0]
        out = self._run(["write-tree"], work_tree=work_tree, index=index)
        return self._remember_tree(index, out.decode().strip())

    def _remember_tree(self, index: Path, tree: str) -> str:
        self._trees[str(index)] = (tree, _signature(index))
        return tree

    def _write_excludes(
        self, work_tree: Path, never: Sequence[Path], patterns: Sequence[str] = ()
    ) -> Path:
        """A per-workspace excludes file naming ``never`` (the store's files when they lie in
        the workspace: a restore must never write over the store it is recorded in), then the
        settings' ``patterns``."""
        lines = list(patterns)
        for path in never:
            real = Path(os.path.realpath(path))
            if real.is_relative_to(work_tree) and real != work_tree:
                lines.append("/" + _escape_pattern(real.relative_to(work_tree).as_posix()))
        exclude = self.root / "excludes" / self.workspace_key(work_tree)
        text = "".join(f"{line}\n" for line in lines)
        if not exclude.exists() or exclude.read_text() != text:
            exclude.write_text(text)
        return exclude

    def _bytes_added(self, changes: Sequence[Change]) -> int:
        """Bytes on disk of the file versions new to the previous tree: each is a loose object
        file just written (a version the store held packed already costs nothing)."""
        total = 0
        for change in changes:
            if change.status == "D" or change.mode == "160000":
                continue
            loose = self.git_dir / "objects" / change.blob[:2] / change.blob[2:]
            with contextlib.suppress(FileNotFoundError):
                total += loose.stat().st_size
        return total

    # -- reading ---------------------------------------------------------------------------

    def exists(self, tree: str) -> bool:
        self._ensure()
        out = self._run(["cat-file", "-t", tree], ok=(0, 1, 128))
        return out.strip() == b"tree"

    def changes(self, before: str, after: str) -> list[Change]:
        """What turns ``before`` into ``after``, path by path."""
        self._ensure()
        out = self._run(["diff-tree", "-r", "-z", "--no-renames", before, after])
        parts = out.split(b"\0")
        changes = []
        # Records: ":<old mode> <new mode> <old id> <new id> <status>" NUL path NUL
        for i in range(0, len(parts) - 1, 2):
            meta = parts[i].decode().lstrip(":").split()
            changes.append(Change(meta[4][0], os.fsdecode(parts[i + 1]), meta[1], meta[3]))
        return changes

    def diff(self, before: str, after: str) -> str:
        """The unified diff from ``before`` to ``after`` (binary files named, not shown)."""
        self._ensure()
        out = self._run(["diff-tree", "-r", "-p", "--no-renames", "--no-color", before, after])
        return out.decode(errors="replace")

    def size(self, tree: str) -> tuple[int, int]:
        """(files, bytes) of the files the snapshot holds."""
        self._ensure()
        out = self._run(["ls-tree", "-r", "-l", "-z", tree])
        files = total = 0
        for record in out.split(b"\0"):
            if not record:
                continue
            meta = record.split(b"\t", 1)[0].split()
            files += 1
            if len(meta) >= 4 and meta[3].isdigit():
                total += int(meta[3])
        return files, total

    def disk_bytes(self) -> int:
        """Bytes the object store takes on disk."""
        total = 0
        for folder, _dirs, files in os.walk(self.git_dir):
            for name in files:
                with contextlib.suppress(FileNotFoundError):  # removed by a gc meanwhile
                    total += os.lstat(os.path.join(folder, name)).st_size
        return total

    # -- restoring -------------------------------------------------------------------------

    def checkout(self, work_tree: Path, changes: Sequence[Change]) -> None:
        """Apply ``changes`` (from ``changes(current, target)``) to ``work_tree``: write the
        target's version of each added or changed path, delete each deleted one; nothing else
        is touched. Idempotent: a restore cut short runs it again whole.

        The files are read from the object store (``cat-file``) and written by this process
        through ``ConfinedRoot`` (below the folder's descriptor, no symlink followed), never
        by git on the host path: a sandboxed agent swapping a folder for a link meanwhile gets
        the restore refused (``SnapshotError``), never a write outside. New files belong to
        the folder's owner. The index gets the target's entries without their stat, so the
        next snapshot reads these paths again (and only these)."""
        self._ensure()
        work_tree = Path(work_tree)
        index = self.index_of(work_tree)
        write = [c for c in changes if c.status != "D"]
        delete = [c.path for c in changes if c.status == "D"]
        # These update-index calls change the index only (no work-tree file is read or
        # written), but git wants a work tree: the store's own folder, never the workspace.
        placeholder = self.root
        with self._lock(str(index)):
            self._trees.pop(str(index), None)
            self._quiet.pop(str(index), None)
            if delete:
                self._run(
                    ["update-index", "--force-remove", "-z", "--stdin"],
                    work_tree=placeholder,
                    index=index,
                    input=b"\0".join(os.fsencode(p) for p in delete) + b"\0",
                )
            if write:
                self._run(
                    ["update-index", "--add", "-z", "--index-info"],
                    work_tree=placeholder,
                    index=index,
                    input=b"".join(
                        f"{c.mode} {c.blob}\t".encode() + os.fsencode(c.path) + b"\0" for c in write
                    ),
                )
            if not delete and not write:
                return
            if not os.path.lexists(work_tree):
                os.mkdir(work_tree, 0o755)  # a fork's new .git: never through a link
            try:
                with ConfinedRoot(work_tree) as files, self._blobs() as read_blob:
                    for path in delete:
                        _remove(files, path)
                    for change in write:
                        _put(files, change, read_blob)
            except ConfinedPathError as error:
                raise SnapshotError(
                    f"the restore into {work_tree} was refused: {error}; the workspace changed "
                    "while it was restored (a link in the way?): remove it and restore again"
                ) from None

    @contextlib.contextmanager
    def _blobs(self) -> Iterator[Callable[[str], bytes]]:
        """A reader of blob contents by id: one ``cat-file --batch`` for the whole restore,
        asked one blob at a time (never the whole restore in memory)."""
        self._ensure()
        process = subprocess.Popen(
            [self._git or "git", "cat-file", "--batch"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=self._env(),
            cwd=str(self.root),
        )
        assert process.stdin is not None
        assert process.stdout is not None
        stdin, stdout = process.stdin, process.stdout

        def read(blob: str) -> bytes:
            stdin.write(blob.encode() + b"\n")
            stdin.flush()
            header = stdout.readline().split()
            if len(header) != 3 or header[1] != b"blob":
                raise SnapshotError(f"the snapshot store has no file {blob} (it is damaged?)")
            data = stdout.read(int(header[2]))
            stdout.read(1)  # the newline after each object
            return data

        try:
            yield read
        finally:
            with contextlib.suppress(OSError):
                stdin.close()
            stdout.close()
            process.wait()

    # -- refs ------------------------------------------------------------------------------

    def keep(self, conversation_id: str, tree: str) -> None:
        """Keep ``tree`` alive for ``conversation_id`` (until that conversation is deleted)."""
        self._ensure()
        ref = f"{_refs(conversation_id)}{tree}"
        if not self._write_new_ref(ref, tree):
            self._run(["update-ref", ref, tree])

    def _write_new_ref(self, ref: str, tree: str) -> bool:
        """Write the loose ref ``ref`` (new, or already ``tree``) as git itself does: its
        ``.lock`` made exclusively, filled, renamed over. A snapshot ref never changes value,
        so no old value is to be checked; it saves a git process per snapshot of a new tree
        (~2 ms of CPU). False when git should do it (an unexpected name, a lock held, any
        error): then ``update-ref`` decides."""
        if not _TREE_ID.fullmatch(tree):
            return False
        path = self.git_dir / ref
        if path.is_file():
            return True  # kept already (a ref written once is enough)
        lock = path.with_name(path.name + ".lock")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        except OSError:
            return False
        try:
            with os.fdopen(fd, "w") as out:
                out.write(tree + "\n")
            os.replace(lock, path)
        except OSError:
            with contextlib.suppress(OSError):
                lock.unlink()
            return False
        return True

    def kept(self, conversation_id: str) -> list[str]:
        self._ensure()
        out = self._run(["for-each-ref", "--format=%(objectname)", _refs(conversation_id)])
        return out.decode().split()

    def owners(self) -> list[str]:
        """The conversations that keep snapshots here."""
        if not self.git_dir.exists():
            return []
        self._ensure()
        out = self._run(["for-each-ref", "--format=%(refname)", "refs/snapshots/"])
        return sorted({bytes.fromhex(ref.split("/")[2]).decode() for ref in out.decode().split()})

    def forget(self, conversation_id: str) -> int:
        """Drop ``conversation_id``'s refs (its snapshots' objects go at the next ``gc``)."""
        if not self.git_dir.exists():
            return 0
        self._ensure()
        out = self._run(["for-each-ref", "--format=%(refname)", _refs(conversation_id)])
        refs = out.decode().split()
        if refs:
            self._run(
                ["update-ref", "--stdin"],
                input="".join(f"delete {ref}\n" for ref in refs).encode(),
            )
        return len(refs)

    def gc(self) -> tuple[int, int]:
        """Drop every object no snapshot ref reaches and pack the rest: (bytes before, after)."""
        self._ensure()
        before = self.disk_bytes()
        self._run(["reflog", "expire", "--expire=now", "--all"])
        self._run(["gc", "-q", "--prune=now"])
        # What an index held may be gone now (a gc prunes what no ref reaches): ask git again.
        self._trees.clear()
        self._quiet.clear()
        return before, self.disk_bytes()


def _refs(conversation_id: str) -> str:
    """The ref folder of a conversation's snapshots: its id in hex, since an id may hold what
    a ref name may not (':', '..')."""
    return f"refs/snapshots/{conversation_id.encode().hex()}/"


def _signature(path: Path) -> tuple[int, int, int]:
    try:
        info = path.stat()
    except FileNotFoundError:
        return (0, 0, 0)
    return (info.st_ino, info.st_size, info.st_mtime_ns)


def _is_link(mode: int) -> bool:
    return stat.S_ISLNK(mode)


def _escape_pattern(path: str) -> str:
    return "".join("\\" + ch if ch in "*?[]\\!# " else ch for ch in path)


def _index_entries(index: Path) -> int:
    """The entry count in a git index's header (bytes 8..12), without reading the rest."""
    try:
        with index.open("rb") as handle:
            header = handle.read(12)
    except FileNotFoundError:
        return 0
    return int.from_bytes(header[8:12], "big") if len(header) == 12 else 0


def _remove(files: ConfinedRoot, path: str) -> None:
    """Delete ``path`` and then its parent folders that became empty (never the workspace)."""
    target = PurePosixPath(path)
    info = files.lstat(target)
    if info is not None and stat.S_ISDIR(info.st_mode):
        return  # a folder holding files no snapshot tracks: kept
    if info is not None:
        files.unlink(target)
    for parent in target.parents:
        if not parent.parts or not files.rmdir(parent):
            break


def _put(files: ConfinedRoot, change: Change, read_blob: Callable[[str], bytes]) -> None:
    """Write the target's version of ``change.path``: a file with its mode, a symlink, or
    (a submodule) an empty folder. What is in the way is cleared when it holds nothing."""
    target = PurePosixPath(change.path)
    # A parent that is a file or a link: removed (a folder goes there).
    for parent in reversed(target.parents):
        if not parent.parts:
            continue
        found = files.lstat(parent)
        if found is None:
            break
        if not stat.S_ISDIR(found.st_mode):
            files.unlink(parent)
            break
    files.mkdirs(target.parent)
    if change.mode == "160000":
        files.mkdirs(target)
        return
    info = files.lstat(target)
    if info is not None and stat.S_ISDIR(info.st_mode):
        files.rmdir(target)  # not empty: the write below says what is wrong
    data = read_blob(change.blob)
    if change.mode == "120000":
        files.symlink(target, os.fsdecode(data))
        return
    if info is not None and not stat.S_ISREG(info.st_mode) and not stat.S_ISDIR(info.st_mode):
        # A link (never what it names), a FIFO or a socket where a file goes: it goes.
        files.unlink(target)
    mode = (0o755 if change.mode == "100755" else 0o644) & ~_umask()
    files.write(target, data, mode=mode, chmod=True)


@functools.cache
def _umask() -> int:
    """This process's umask (read once: reading it means setting it)."""
    current = os.umask(0o022)
    os.umask(current)
    return current
