"""A task attempt's fresh workspace: its starting files (a folder copied, or a repository
checked out at a commit), a baseline of them kept outside the workspace, and the patch.

Layout of an attempt folder: ``workspace/`` (the agent's, the only folder its sandbox can
write), ``baseline.git/`` (a private git repository whose work tree is ``workspace/``: the
starting files are committed there after setup, with their own ignore rules, so the patch is
``git diff`` against them, new, changed and removed files alike, binary files included, what
the starting files ignore left out) and ``clean/`` (a copy of the starting files the agent
never touched: the patch is scored there, eval.scoring).

git reads the agent's files inside the attempt's sandbox (``AttemptFolder.sandbox``: the
attempt folder its only writable one, network off), never as Treadle's own user on the host:
whatever the agent left there (links, FIFOs, odd names, files made to trip git) meets the same
walls as the agent did.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from treadle.data.settings import (
    DEFAULT_SNAPSHOT_EXCLUDES,
    MAX_SNAPSHOT_EXCLUDES,
    SandboxSettings,
    SnapshotSettings,
)
from treadle.errors import TreadleError
from treadle.eval.ignore_rules import exclude_file_text
from treadle.eval.tasks import EvalTask
from treadle.runtime.snapshots.gitstore import NO_IGNORE_FILE
from treadle.runtime.workspace.sandbox import SandboxedWorkspace
from treadle.runtime.workspace.shell import launch_argv

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
    """One attempt's folder: ``workspace`` (the agent's files) and the private baseline.
    ``sandbox``: where git runs on them (its network always off); None or ``none``: on the
    host, as this process's user."""

    root: Path
    sandbox: SandboxSettings | None = None

    @property
    def workspace(self) -> Path:
        return self.root / "workspace"

    @property
    def baseline(self) -> Path:
        return self.root / "baseline.git"

    @property
    def clean(self) -> Path:
        """A copy of the starting files the agent never touched: the patch is scored here."""
        return self.root / "clean"

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


FOLDER_PREFIX = "treadle-eval-"
PID_DIGITS = 7
"""Digits of the largest pid Linux gives (``pid_max`` is at most 4,194,304)."""


def make_attempt_folder(
    task: EvalTask, parent: Path | None = None, sandbox: SandboxSettings | None = None
) -> AttemptFolder:
    """A new attempt folder holding the task's starting files (``WorkspaceSetupError`` when
    they cannot be had; nothing is left behind then), whose git runs in ``sandbox``
    (``AttemptFolder.sandbox``). Its name carries this process's id:
    the folders of a worker that was killed are removed by the next attempt started in
    ``parent`` on this machine (``remove_orphans``)."""
    parent = parent or Path(tempfile.gettempdir())
    parent.mkdir(parents=True, exist_ok=True)
    remove_orphans(parent)
    safe = task.id.replace(":", "_")[:60]
    # The pid at a fixed width: the folder's path is in what the model reads (the terminal's
    # cwd), so a pid with one more digit made the same task cost one more token.
    prefix = f"{FOLDER_PREFIX}{os.getpid():0{PID_DIGITS}d}-{safe}-"
    folder = AttemptFolder(Path(tempfile.mkdtemp(prefix=prefix, dir=parent)), sandbox)
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
    _copy_tree(source, target)


def _copy_tree(source: Path, target: Path) -> None:
    try:
        # symlinks=True: a link is copied as a link, never followed out of the task's folder.
        shutil.copytree(source, target, symlinks=True)
    except (OSError, shutil.Error) as error:
        raise WorkspaceSetupError(f"cannot copy {source}: {error}") from None


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


STARTING_TREE = "starting-tree"
"""In the baseline: the git tree id of the starting files, which every diff is taken against."""
STARTING_EXCLUDES = "info/starting-excludes"
"""In the baseline: the starting files' own ignore rules as one exclude file (ignore_rules)."""
NEUTRAL_ATTRIBUTES = "* -text -eol -crlf -ident -filter -working-tree-encoding\n"
"""The baseline's own attributes (``info/attributes`` wins over any ``.gitattributes`` in the
work tree): files are taken byte for byte, whatever attributes the agent wrote (``eol=crlf``,
``ident`` or ``working-tree-encoding`` would make the patch differ from the files)."""
MAX_LEFT_OUT = 200
"""How many left-out paths a patch names (then how many more there were)."""


@dataclass(frozen=True)
class Patch:
    """The agent's change: ``text`` (``git apply`` takes it), the paths it touches, and what
    was left out of it and why (new files the starting files' own ignore rules ignore; nested
    repositories the agent made, whose files git cannot take as files)."""

    text: str
    touched: tuple[str, ...] = ()
    left_out: tuple[str, ...] = ()
    too_large: bool = False


def record_baseline(folder: AttemptFolder, *, clean_copy: bool = True) -> None:
    """Commit the workspace's files as they are now into the private baseline repository
    (ignored files as the starting files' own ``.gitignore`` files say), keep their ignore
    rules, and copy the files whole (ignored ones included: what setup installed) as the
    clean checkout the patch will be applied to (``clean_copy``)."""
    # The copy reads the files while git records them: neither writes the workspace.
    with ThreadPoolExecutor(max_workers=1) as pool:
        copying = pool.submit(_copy_tree, folder.workspace, folder.clean) if clean_copy else None
        _record(folder)
        if copying is not None:
            copying.result()


def _record(folder: AttemptFolder) -> None:
    # No template: no sample hooks to copy (and remove) per attempt.
    _git(
        ["init", "--quiet", "--bare", "--template=", str(folder.baseline)], what="make the baseline"
    )
    info = folder.baseline / "info"
    info.mkdir(exist_ok=True)
    (info / "attributes").write_text(NEUTRAL_ATTRIBUTES, encoding="utf-8")
    _baseline_git(folder, [*PACKED, "add", "--all", "."], what="record the starting files")
    # The starting files are a tree, not a commit: the patch is the index against it (a
    # commit would cost a process and a reflog per attempt for nothing).
    with ThreadPoolExecutor(max_workers=2) as pool:
        writing = pool.submit(_baseline_git, folder, ["write-tree"], what="record the files")
        listing = pool.submit(
            _baseline_git_bytes, folder, ["ls-files", "-z", "--", ":(glob)**/.gitignore"],
            what="read the ignore rules",
        )  # fmt: skip
        (folder.baseline / STARTING_TREE).write_text(writing.result().strip())
        names = listing.result()
    ignore_files = {}
    for name in _split(names):
        # Read from the disk, just recorded as the baseline: no agent has run yet. git never
        # follows a linked .gitignore, and neither does this.
        path = folder.workspace / name
        if path.is_file() and not path.is_symlink():
            ignore_files[name] = path.read_bytes().decode("utf-8", "replace")
    (folder.baseline / STARTING_EXCLUDES).write_text(
        exclude_file_text(ignore_files), encoding="utf-8", errors="surrogateescape"
    )


def snapshot_settings(folder: AttemptFolder, *, enabled: bool) -> SnapshotSettings:
    """Snapshots of the attempt's conversation with the starting files' own ignore rules,
    never one the agent wrote (as the patch is taken). Rules past what the settings hold
    (``MAX_SNAPSHOT_EXCLUDES``, one line of up to 200 characters each) give way to the default
    excludes alone: a snapshot may then hold more than the patch, never less."""
    text = (folder.baseline / STARTING_EXCLUDES).read_text(encoding="utf-8", errors="replace")
    rules = tuple(dict.fromkeys(line for line in text.splitlines() if line.strip()))
    exclude = (*DEFAULT_SNAPSHOT_EXCLUDES, *rules)
    if len(exclude) > MAX_SNAPSHOT_EXCLUDES or any(len(rule) > 200 for rule in rules):
        exclude = DEFAULT_SNAPSHOT_EXCLUDES
    return SnapshotSettings(enabled=enabled, exclude=exclude, workspace_ignore_files=False)


def starting_tree_id(folder: AttemptFolder) -> str:
    """The git tree id of the starting files (a digest of their names, modes and bytes)."""
    return (folder.baseline / STARTING_TREE).read_text().strip()


def folder_commit(folder: AttemptFolder) -> str | None:
    """The commit id a repository task's starting files were checked out at (None for a
    folder task)."""
    if not (folder.clean / ".git").is_dir():
        return None
    head = _git(
        ["--git-dir", str(folder.clean / ".git"), "rev-parse", "--verify", "HEAD"],
        what="read the commit",
        check=False,
    )
    return head.decode().strip() or None


def workspace_patch(folder: AttemptFolder) -> str:
    """The patch's text (see ``collect_patch``)."""
    return collect_patch(folder).text


def collect_patch(folder: AttemptFolder) -> Patch:
    """The unified diff from the starting files to the workspace's files now (``git apply``
    takes it; empty when nothing changed), new, changed and removed files alike. Only the
    starting files' own ignore rules apply: an ignore file the agent wrote hides nothing. New
    files those rules ignore, and nested repositories (git takes a folder holding a ``.git``
    as a repository, never its files), are left out and named in ``left_out``."""
    excludes = [
        # No per-folder ignore file is read: the workspace's (the agent's included) play no part.
        f"--exclude-per-directory={NO_IGNORE_FILE}",
        f"--exclude-from={folder.baseline / STARTING_EXCLUDES}",
    ]
    # Three walks of the workspace side by side (each git process waits on the disk more than
    # on a core). Listing untracked files while the update rewrites the index is safe: git
    # renames a whole new index into place, and the set of tracked paths it lists against
    # only loses files that are gone from the disk.
    with ThreadPoolExecutor(max_workers=3) as pool:
        updating = pool.submit(
            _baseline_git, folder, [*PACKED, "add", "--update", "."],
            what="read the workspace's changes",
        )  # fmt: skip
        listing = pool.submit(
            _baseline_git_bytes, folder, ["ls-files", "-z", "--others", *excludes],
            what="list the new files",
        )  # fmt: skip
        ignoring = pool.submit(
            _baseline_git_bytes, folder,
            ["ls-files", "-z", "--others", "--ignored", "--directory", *excludes],
            what="list the ignored files",
        )  # fmt: skip
        updating.result()
        new, ignored = _split(listing.result()), _split(ignoring.result())
    nested = [name for name in new if name.endswith("/")]
    files = [name for name in new if not name.endswith("/")]
    if files:
        listed = folder.root / "new-files"
        listed.write_bytes(
            b"".join(name.encode("utf-8", "surrogateescape") + b"\0" for name in files)
        )
        try:
            _baseline_git(
                folder,
                [*PACKED, "--literal-pathspecs", "add", "--force",
                 f"--pathspec-from-file={listed}", "--pathspec-file-nul"],
                what="read the workspace's new files",
            )  # fmt: skip
        finally:
            listed.unlink(missing_ok=True)
    left_out = [f"{name} (a nested repository: its files are not taken)" for name in nested]
    left_out += [f"{name} (ignored by the starting files' rules)" for name in ignored]
    if len(left_out) > MAX_LEFT_OUT:
        more = len(left_out) - MAX_LEFT_OUT
        left_out = [*left_out[:MAX_LEFT_OUT], f"... and {more} more"]
    start = starting_tree_id(folder)
    with ThreadPoolExecutor(max_workers=1) as pool:
        naming = pool.submit(
            _baseline_git_bytes, folder,
            ["diff", "--cached", "--name-only", "-z", "--no-renames", start], what="diff",
        )  # fmt: skip
        raw = _bounded_diff(folder, _diff_args(start))
        touched = tuple(_split(naming.result()))
    text = _diff_text(folder, touched, raw, start)
    return Patch(text, touched, tuple(left_out), too_large=text == patch_too_large())


def _split(output: bytes) -> list[str]:
    return [name for name in output.decode("utf-8", "surrogateescape").split("\0") if name]


def _diff_args(start: str) -> list[str]:
    # Paths stay quoted as git quotes them (octal escapes): a patch's headers are ASCII.
    return ["diff", "--cached", "--binary", "--no-color", "--no-ext-diff", "--no-renames", start]


def _diff_text(
    folder: AttemptFolder, touched: tuple[str, ...], raw: bytes | None, start: str
) -> str:
    """The patch as text from the diff's bytes ``raw`` (None: over the bound)."""
    if raw is None:
        return patch_too_large()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        pass
    # A file git took for text is not UTF-8 (a text patch of it could not be stored as text):
    # such files are diffed as binary (base85, which ``git apply`` takes) by the baseline's
    # own attributes, which win over any the agent wrote.
    attributes = folder.baseline / "info" / "attributes"
    attributes.write_text(
        NEUTRAL_ATTRIBUTES
        + "".join(
            f"{_attribute_pattern(name)} -diff\n"
            for name in touched
            if not _is_utf8(folder, name, start)
        ),
        encoding="utf-8",
        errors="surrogateescape",
    )
    again = _bounded_diff(folder, _diff_args(start))
    return patch_too_large() if again is None else again.decode("utf-8", "replace")


def apply_patch(folder: AttemptFolder, text: str, name: str) -> None:
    """Apply the patch ``text`` to the clean checkout (``WorkspaceSetupError`` with git's
    reason when it does not apply). git refuses a path outside the checkout, and one that
    leads through a link."""
    path = folder.root / name
    path.write_text(text, encoding="utf-8", errors="surrogateescape")
    try:
        _git(
            ["-C", str(folder.clean), f"--git-dir={folder.baseline}",
             f"--work-tree={folder.clean}", "apply", "--binary", "--whitespace=nowarn", str(path)],
            what="apply the patch",
        )  # fmt: skip
    finally:
        path.unlink(missing_ok=True)


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


def _is_utf8(folder: AttemptFolder, name: str, start: str) -> bool:
    """Whether both sides of ``name`` (the starting file and the file now) are UTF-8."""
    # Both from git's objects (the file now as the index took it), never from the workspace's
    # path: a folder of it the agent swapped for a link would lead anywhere on this machine.
    sides = [
        _baseline_git_bytes(folder, ["cat-file", "blob", spec], what="read", check=False)
        for spec in (f"{start}:{name}", f":{name}")
    ]
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
        sandbox=folder.sandbox,
        confined_to=folder.root,
    )


SAFE_GIT_CONFIG = (
    *("-c", "core.autocrlf=false", "-c", "core.fileMode=true", "-c", "core.symlinks=true"),
    *("-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false"),
    *("-c", "core.untrackedCache=false", "-c", "safe.directory=*"),
)
"""git on a work tree the agent controlled: no hooks, no file-system monitor (a configured
one is a command), no cached untracked lists; the work tree may belong to another user
(``safe.directory``). The repository is always the baseline's (``--git-dir``), so no
configuration the agent wrote (a ``.git/config`` in the workspace) is ever read."""


def _git(
    args: list[str],
    *,
    what: str,
    check: bool = True,
    stdout: IO[bytes] | None = None,
    sandbox: SandboxSettings | None = None,
    confined_to: Path | None = None,
) -> bytes:
    """git's output (b"" when it failed and ``check`` is off, or when it went to ``stdout``);
    run inside ``sandbox`` (network off) with ``confined_to`` its only writable folder, when
    both are given and the sandbox is one."""
    if sandbox is None or sandbox.kind == "none" or confined_to is None:
        return _run_git(["git", *SAFE_GIT_CONFIG, *args], {}, what, check, stdout)
    isolated = SandboxedWorkspace(
        confined_to, sandbox.model_copy(update={"network": "off", "mounts_ro": ()})
    )
    with tempfile.TemporaryDirectory(prefix="treadle-eval-git-") as private:
        shell = isolated.shell_command(["git", *SAFE_GIT_CONFIG, *args], Path(private))
        try:
            return _run_git(
                launch_argv(shell, controlling_terminal=False), shell.env, what, check, stdout
            )
        finally:
            if shell.cgroup is not None:
                shell.cgroup.kill()


def _run_git(
    argv: list[str],
    sandbox_env: Mapping[str, str],
    what: str,
    check: bool,
    stdout: IO[bytes] | None,
) -> bytes:
    # Neither the user's nor the system's git configuration (hooks, filters, signing) applies:
    # the baseline must be the files as they are.
    env = {
        **sandbox_env,
        "PATH": sandbox_env.get("PATH") or os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.devnull,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_AUTHOR_NAME": "treadle-eval",
        "GIT_AUTHOR_EMAIL": "eval@treadle.invalid",
        "GIT_COMMITTER_NAME": "treadle-eval",
        "GIT_COMMITTER_EMAIL": "eval@treadle.invalid",
        "GIT_TERMINAL_PROMPT": "0",
        "LANG": "C.UTF-8",
        "GIT_ATTR_NOSYSTEM": "1",
        "GIT_OPTIONAL_LOCKS": "0",
    }
    try:
        done = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE if stdout is None else stdout,
            stderr=subprocess.PIPE,
            env=env,
            timeout=GIT_TIMEOUT_S,
            check=False,
            start_new_session=True,  # launch_argv's contract: a sandbox's group of its own
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise WorkspaceSetupError(f"cannot {what}: {error}") from None
    if done.returncode != 0 and check:
        said = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise WorkspaceSetupError(f"cannot {what}: {said[-1] if said else done.returncode}")
    return done.stdout if done.returncode == 0 and done.stdout is not None else b""
