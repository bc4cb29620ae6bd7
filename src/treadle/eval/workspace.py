"""A task attempt's fresh workspace: its starting files (a folder copied, or a repository
checked out at a commit), a baseline of them kept outside the workspace, and the patch.

Layout of an attempt folder: ``workspace/`` (the agent's, the only folder its sandbox can
write) and ``baseline.git/`` (a private git repository whose work tree is ``workspace/``: the
starting files are committed there after setup, so the patch is ``git diff`` against them,
new, changed and removed files alike, binary files included, ignored files left out).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from treadle.errors import TreadleError
from treadle.eval.tasks import EvalTask

PACKED = ("-c", "core.bigFileThreshold=1")
"""For ``git add`` only: file contents go into one pack per add instead of a loose object
(and a folder) per file, so making and removing an attempt's baseline touches a few files,
not hundreds (a remove costs milliseconds per folder on some disks). Diffs are unaffected:
the threshold is not set when diffing."""

GIT_TIMEOUT_S = 600.0
"""A clone of a large repository may take minutes; anything longer is stuck."""

MAX_PATCH_BYTES = 16 * 1024 * 1024
"""The largest patch an attempt keeps. The agent may write gigabytes (its sandbox's file size
limit is per file): such a diff is written to a file, never read into memory, and what is kept
instead says how large it was (``patch_too_large``)."""


class WorkspaceSetupError(TreadleError):
    """The task's starting files could not be made (missing folder, unknown commit...)."""


@dataclass(frozen=True)
class AttemptFolder:
    """One attempt's folder: ``workspace`` (the agent's files) and the private baseline."""

    root: Path

    @property
    def workspace(self) -> Path:
        return self.root / "workspace"

    @property
    def baseline(self) -> Path:
        return self.root / "baseline.git"

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


FOLDER_PREFIX = "treadle-eval-"


def make_attempt_folder(task: EvalTask, parent: Path | None = None) -> AttemptFolder:
    """A new attempt folder holding the task's starting files (``WorkspaceSetupError`` when
    they cannot be had; nothing is left behind then). Its name carries this process's id:
    the folders of a worker that was killed are removed by the next attempt started in
    ``parent`` on this machine (``remove_orphans``)."""
    parent = parent or Path(tempfile.gettempdir())
    parent.mkdir(parents=True, exist_ok=True)
    remove_orphans(parent)
    safe = task.id.replace(":", "_")[:60]
    prefix = f"{FOLDER_PREFIX}{os.getpid()}-{safe}-"
    folder = AttemptFolder(Path(tempfile.mkdtemp(prefix=prefix, dir=parent)))
    try:
        if task.workspace is not None:
            _copy_folder(Path(task.workspace), folder.workspace)
        else:
            assert task.repo is not None
            assert task.commit is not None
            _check_out(task.repo, task.commit, folder.workspace)
    except BaseException:
        folder.remove()
        raise
    return folder


def remove_orphans(parent: Path) -> list[Path]:
    """Remove the attempt folders in ``parent`` whose process is gone (a worker killed
    mid-task never removes its own); the folders removed."""
    removed = []
    for entry in parent.glob(f"{FOLDER_PREFIX}*"):
        pid = entry.name.removeprefix(FOLDER_PREFIX).split("-", 1)[0]
        if pid.isdigit() and not _alive(int(pid)) and entry.is_dir():
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _copy_folder(source: Path, target: Path) -> None:
    if not source.is_dir():
        raise WorkspaceSetupError(f"workspace {source} is not a folder on this machine")
    try:
        # symlinks=True: a link is copied as a link, never followed out of the task's folder.
        shutil.copytree(source, target, symlinks=True)
    except (OSError, shutil.Error) as error:
        raise WorkspaceSetupError(f"cannot copy workspace {source}: {error}") from None


def _check_out(repo: str, commit: str, target: Path) -> None:
    # After "--" and "--end-of-options" neither can be taken for an option, whatever the task
    # file says (it checks too); checkout then gets the commit's hex id only.
    _git(["clone", "--quiet", "--no-checkout", "--", repo, str(target)], what=f"clone {repo}")
    resolved = _git(
        ["-C", str(target), "rev-parse", "--verify", "--end-of-options", f"{commit}^{{commit}}"],
        what=f"find {commit} in {repo}",
    )
    _git(
        ["-C", str(target), "checkout", "--quiet", "--detach", resolved.decode().strip()],
        what=f"check out {commit} of {repo}",
    )


def record_baseline(folder: AttemptFolder) -> None:
    """Commit the workspace's files as they are now into the private baseline repository."""
    # No template: no sample hooks to copy (and remove) per attempt.
    _git(
        ["init", "--quiet", "--bare", "--template=", str(folder.baseline)], what="make the baseline"
    )
    _baseline_git(folder, [*PACKED, "add", "--all", "."], what="record the starting files")
    _baseline_git(
        folder,
        ["commit", "--quiet", "--allow-empty", "--no-verify", "-m", "starting files"],
        what="record the starting files",
    )


def workspace_patch(folder: AttemptFolder) -> str:
    """The unified diff from the starting files to the workspace's files now (``git apply``
    takes it; empty when nothing changed). As in ``git diff``, files the workspace's own
    ``.gitignore`` files ignore (build output, caches) and nested ``.git`` folders are not
    part of it."""
    _baseline_git(folder, [*PACKED, "add", "--all", "."], what="read the workspace's changes")
    # Paths stay quoted as git quotes them (octal escapes): a patch's headers are ASCII.
    diff = ["diff", "--cached", "--binary", "--no-color", "--no-ext-diff", "--no-renames", "HEAD"]
    raw = _bounded_diff(folder, diff)
    if raw is None:
        return patch_too_large()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        pass
    # A file git took for text is not UTF-8 (a text patch of it could not be stored as text):
    # such files are diffed as binary (base85, which ``git apply`` takes) by an attributes
    # file of the baseline's own.
    names = _baseline_git_bytes(
        folder, ["diff", "--cached", "--name-only", "-z", "--no-renames", "HEAD"], what="diff"
    )
    attributes = folder.root / "binary.attributes"
    attributes.write_text(
        "".join(
            f"{_attribute_pattern(name)} -diff\n"
            for name in names.decode("utf-8", "surrogateescape").split("\0")
            if name and not _is_utf8(folder, name)
        ),
        encoding="utf-8",
        errors="surrogateescape",
    )
    raw = _bounded_diff(folder, ["-c", f"core.attributesFile={attributes}", *diff])
    return patch_too_large() if raw is None else raw.decode("utf-8", "replace")


def patch_too_large() -> str:
    """What an attempt keeps instead of a patch over ``MAX_PATCH_BYTES`` (``git apply`` refuses
    it: "No valid patches in input")."""
    return f"# treadle: the patch is over {MAX_PATCH_BYTES} bytes (MAX_PATCH_BYTES): not kept\n"


def _bounded_diff(folder: AttemptFolder, args: list[str]) -> bytes | None:
    """The output of the baseline's ``git diff ARGS``, or None when it is over
    ``MAX_PATCH_BYTES`` (git writes to a file beside the workspace: memory holds the bound)."""
    output = folder.root / "patch.diff"
    try:
        with output.open("wb") as file:
            _baseline_git_bytes(folder, args, what="diff the workspace", stdout=file)
        if output.stat().st_size > MAX_PATCH_BYTES:
            return None
        return output.read_bytes()
    finally:
        output.unlink(missing_ok=True)


def _is_utf8(folder: AttemptFolder, name: str) -> bool:
    """Whether both sides of ``name`` (the starting file and the file now) are UTF-8."""
    sides = [
        _baseline_git_bytes(folder, ["cat-file", "blob", f"HEAD:{name}"], what="read", check=False)
    ]
    path = folder.workspace / name
    # Never through a link: the agent's link may lead anywhere on this machine (a 4 GB file,
    # /proc/self/pagemap, which cannot be read whole); git diffs a link as its target's name.
    if path.is_file() and not path.is_symlink():
        sides.append(path.read_bytes())
    try:
        for side in sides:
            side.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _attribute_pattern(name: str) -> str:
    """``name`` as a gitattributes pattern matching that path only: glob characters escaped,
    then the whole C-quoted (a name may hold spaces, quotes or newlines)."""
    globbed = "".join("\\" + ch if ch in "\\*?[" else ch for ch in "/" + name)
    quoted = globbed.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + quoted.replace("\n", "\\n").replace("\t", "\\t") + '"'


def _baseline_git(folder: AttemptFolder, args: list[str], *, what: str) -> str:
    return _baseline_git_bytes(folder, args, what=what).decode("utf-8", "replace")


def _baseline_git_bytes(
    folder: AttemptFolder,
    args: list[str],
    *,
    what: str,
    check: bool = True,
    stdout: IO[bytes] | None = None,
) -> bytes:
    return _git(
        [f"--git-dir={folder.baseline}", f"--work-tree={folder.workspace}", *args],
        what=what,
        check=check,
        stdout=stdout,
    )


def _git(
    args: list[str], *, what: str, check: bool = True, stdout: IO[bytes] | None = None
) -> bytes:
    """git's output (b"" when it failed and ``check`` is off, or when it went to ``stdout``)."""
    # Neither the user's nor the system's git configuration (hooks, filters, signing) applies:
    # the baseline must be the files as they are.
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.devnull,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_AUTHOR_NAME": "treadle-eval",
        "GIT_AUTHOR_EMAIL": "eval@treadle.invalid",
        "GIT_COMMITTER_NAME": "treadle-eval",
        "GIT_COMMITTER_EMAIL": "eval@treadle.invalid",
        "GIT_TERMINAL_PROMPT": "0",
        "LANG": "C.UTF-8",
    }
    try:
        done = subprocess.run(
            ["git", "-c", "core.autocrlf=false", "-c", "core.fileMode=true", *args],
            stdout=subprocess.PIPE if stdout is None else stdout,
            stderr=subprocess.PIPE,
            env=env,
            timeout=GIT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise WorkspaceSetupError(f"cannot {what}: {error}") from None
    if done.returncode != 0 and check:
        said = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise WorkspaceSetupError(f"cannot {what}: {said[-1] if said else done.returncode}")
    return done.stdout if done.returncode == 0 and done.stdout is not None else b""
