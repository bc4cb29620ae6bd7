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
import hashlib
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from treadle.errors import TreadleError

DEFAULT_MAX_FILE_BYTES = 10 * 1024 * 1024
"""Files larger than this are not snapshotted (and the snapshot says so)."""
SKIPPED_SHOWN = 100
"""At most this many skipped paths are listed in a snapshot's record (the count is exact)."""
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

    # -- plumbing ------------------------------------------------------------------------

    def _ensure(self) -> None:
        if self._ready:
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
    ) -> TreeSnapshot:
        """Record the files of ``work_tree`` (its ``.gitignore``d paths, its ``.git`` and
        files over ``max_file_bytes`` skipped; ``never``: paths never recorded nor touched,
        e.g. the store's own files). ``previous``: the tree ``changed`` is counted from
        (default: the tree this workspace's index held)."""
        self._ensure()
        work_tree = Path(os.path.realpath(work_tree))
        index = self.index_of(work_tree)
        with self._lock(str(index)):
            exclude = self._write_excludes(work_tree, never)
            config = ["-c", f"core.excludesFile={exclude}"]
            before = previous or self._index_tree(work_tree, index)
            # The two walks of the workspace run side by side: what changed, what is ignored.
            ignoring = self._start(
                [*config, "ls-files", "-z", "-o", "-i", "--exclude-standard", "--directory"],
                work_tree=work_tree,
                index=index,
            )
            try:
                listed = self._run(
                    [*config, "ls-files", "-z", "-m", "-o", "-d", "--exclude-standard"],
                    work_tree=work_tree,
                    index=index,
                )
            finally:
                ignored = self._finish(ignoring)
            update: list[str] = []
            remove: list[str] = []
            skipped = list(extra_skipped)
            for raw in dict.fromkeys(listed.split(b"\0")):
                if not raw:
                    continue
                path = os.fsdecode(raw)
                if path.endswith("/"):  # a nested git repository: its files are its own
                    skipped.append(f"{path} (a git repository inside the workspace)")
                    continue
                try:
                    info = os.lstat(work_tree / path)
                except FileNotFoundError:
                    update.append(path)  # deleted: --remove drops it from the index
                    continue
                if info.st_size > max_file_bytes and not _is_link(info.st_mode):
                    skipped.append(f"{path} (over {max_file_bytes} bytes)")
                    remove.append(path)
                    continue
                update.append(path)
            skipped.extend(f"{os.fsdecode(raw)} (ignored)" for raw in ignored.split(b"\0") if raw)
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
            return TreeSnapshot(
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

    def _write_excludes(self, work_tree: Path, never: Sequence[Path]) -> Path:
        """A per-workspace excludes file naming ``never`` (the store's files when they lie in
        the workspace: a restore must never write over the store it is recorded in)."""
        lines = []
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
        is touched, and the index keeps the stat of every other file (so the next snapshot
        reads only these). Idempotent: a restore cut short runs it again whole."""
        self._ensure()
        work_tree = Path(os.path.realpath(work_tree))
        index = self.index_of(work_tree)
        write = [c for c in changes if c.status != "D"]
        delete = [c.path for c in changes if c.status == "D"]
        with self._lock(str(index)):
            self._trees.pop(str(index), None)
            if delete:
                self._run(
                    ["update-index", "--force-remove", "-z", "--stdin"],
                    work_tree=work_tree,
                    index=index,
                    input=b"\0".join(os.fsencode(p) for p in delete) + b"\0",
                )
                for path in delete:
                    _remove(work_tree, path)
            if write:
                self._run(
                    ["update-index", "-z", "--index-info"],
                    work_tree=work_tree,
                    index=index,
                    input=b"".join(
                        f"{c.mode} {c.blob}\t".encode() + os.fsencode(c.path) + b"\0" for c in write
                    ),
                )
                for change in write:  # a folder where a file goes, or the other way round
                    _clear_way(work_tree, change.path)
                self._run(
                    ["checkout-index", "-f", "-u", "-z", "--stdin"],
                    work_tree=work_tree,
                    index=index,
                    input=b"\0".join(os.fsencode(c.path) for c in write) + b"\0",
                )

    # -- refs ------------------------------------------------------------------------------

    def keep(self, conversation_id: str, tree: str) -> None:
        """Keep ``tree`` alive for ``conversation_id`` (until that conversation is deleted)."""
        self._ensure()
        self._run(["update-ref", f"{_refs(conversation_id)}{tree}", tree])

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
    import stat

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


def _remove(work_tree: Path, path: str) -> None:
    """Delete ``path`` and then its parent folders that became empty (never the workspace)."""
    target = work_tree / path
    try:
        if target.is_dir() and not target.is_symlink():
            return  # a folder holding files no snapshot tracks: kept
        target.unlink()
    except FileNotFoundError:
        pass
    parent = target.parent
    while parent != work_tree and parent.is_relative_to(work_tree):
        try:
            parent.rmdir()
        except OSError:
            break
        parent = parent.parent


def _clear_way(work_tree: Path, path: str) -> None:
    """A file whose place is taken by an empty folder (or a parent by a file) cannot be
    written: clear what is in the way when it holds nothing."""
    target = work_tree / path
    if target.is_dir() and not target.is_symlink():
        with contextlib.suppress(OSError):  # not empty: checkout-index says what is wrong
            target.rmdir()
    for parent in reversed(target.relative_to(work_tree).parents):
        folder = work_tree / parent
        if folder != work_tree and (folder.is_file() or folder.is_symlink()):
            folder.unlink()
