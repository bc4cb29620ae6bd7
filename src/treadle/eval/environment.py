"""What an eval result records of where and on what it ran, and the digest of an eval's
inputs: the starting files of each task (a folder's contents, a repository's resolved
commit) and its hidden files, so that changed files make another eval, never resume an old
one.

The driver knows the model and its settings (``run_settings``); the machine's part (Treadle,
Python, the OS, the sandbox) is read by the worker that ran the attempt
(``worker_environment``): on a cluster it may not be the driver's.
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import re
import socket
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

from treadle.data.settings import ModelChoice, SandboxSettings
from treadle.eval.tasks import TaskFile, TaskFileError

DIGEST_CHUNK = 1024 * 1024
MISSING = "missing on the machine that planned the eval"


def folder_digest(folder: Path, *, what: str) -> str:
    """SHA-256 of a folder's tree: each entry's relative name, kind, executable bit and bytes
    (a link's target, never followed). ``TaskFileError`` when it is not a folder."""
    if not folder.is_dir():
        raise TaskFileError(f"{what} {folder} is not a folder on this machine")
    digest = hashlib.sha256()
    for root, dirs, files in os.walk(folder, followlinks=False):
        dirs.sort()
        base = Path(root)
        for name in sorted(dirs + files):
            path = base / name
            relative = str(path.relative_to(folder)).encode("utf-8", "surrogateescape")
            info = path.lstat()
            if stat.S_ISLNK(info.st_mode):
                digest.update(b"L" + relative + b"\0" + os.fsencode(os.readlink(path)) + b"\0")
            elif stat.S_ISDIR(info.st_mode):
                digest.update(b"D" + relative + b"\0")
            elif stat.S_ISREG(info.st_mode):
                executable = b"x" if info.st_mode & 0o111 else b"-"
                digest.update(b"F" + executable + relative + b"\0")
                with path.open("rb") as file:
                    while chunk := file.read(DIGEST_CHUNK):
                        digest.update(chunk)
                digest.update(b"\0")
            else:  # a FIFO or a device: its name and kind only, never read
                digest.update(b"O" + relative + b"\0")
    return digest.hexdigest()


def resolved_commit(repo: str, commit: str) -> str:
    """The commit id ``commit`` names in ``repo``: a local repository's by ``rev-parse``; a
    URL's by ``ls-remote`` (a branch or tag name moves: the eval id must change with it). A
    full commit id is taken as it is; one that cannot be resolved (no network, an unknown
    name) is kept as given, and the worker that clones it records what it got."""
    if _FULL_ID.fullmatch(commit):
        return commit
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.devnull,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_TERMINAL_PROMPT": "0",  # a repository that wants a password: unresolved, not a hang
    }
    if "://" in repo or repo.startswith("git@"):
        return _remote_commit(repo, commit, env) or commit
    if not Path(repo).exists():
        return commit
    done = subprocess.run(
        ["git", "-c", "core.fsmonitor=false", "-c", "safe.directory=*", "-C", repo, "rev-parse",
         "--verify", "--end-of-options", f"{commit}^{{commit}}"],
        capture_output=True, env=env, timeout=60, check=False,
    )  # fmt: skip
    return done.stdout.decode().strip() if done.returncode == 0 else commit


_FULL_ID = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
"""A whole SHA-1 or SHA-256 commit id: nothing to resolve."""


def _remote_commit(url: str, name: str, env: dict[str, str]) -> str | None:
    """The commit the remote's ref ``name`` points at (a branch, then a tag, peeled), or None."""
    try:
        done = subprocess.run(
            ["git", "ls-remote", "--end-of-options", url, name],
            capture_output=True, env=env, timeout=60, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return None
    if done.returncode != 0:
        return None
    refs = {}
    for line in done.stdout.decode(errors="replace").splitlines():
        sha, _, ref = line.partition("\t")
        refs[ref] = sha
    for ref in (f"refs/heads/{name}", f"refs/tags/{name}^{{}}", f"refs/tags/{name}", name):
        if _FULL_ID.fullmatch(refs.get(ref, "")):
            return refs[ref]
    return None


def inputs_digest(task_file: TaskFile) -> tuple[str, dict[str, dict[str, str]]]:
    """The digest of an eval's inputs (the task file's bytes and every task's sources: its
    starting files' digest or resolved commit, its hidden files' digest) and each task's
    sources. A folder shared by tasks is read once."""
    folders: dict[str, str] = {}

    def folder(path: str, what: str) -> str:
        # A folder this machine does not have may be on the workers' (a cluster): its
        # attempts say so; its digest cannot be had here.
        if path not in folders:
            folders[path] = folder_digest(Path(path), what=what) if Path(path).is_dir() else MISSING
        return folders[path]

    digest = hashlib.sha256(task_file.sha256.encode())
    per_task: dict[str, dict[str, str]] = {}
    for task in task_file.tasks:
        sources: dict[str, str] = {}
        if task.workspace is not None:
            sources["starting_files_sha256"] = folder(task.workspace, "workspace")
        elif task.repo is not None and task.commit is not None:
            sources["commit"] = resolved_commit(task.repo, task.commit)
        if task.hidden_files is not None:
            sources["hidden_files_sha256"] = folder(
                task.hidden_files, f"task {task.id!r}: hidden_files"
            )
        per_task[task.id] = sources
        digest.update(task.id.encode() + b"\0")
        for key in sorted(sources):
            digest.update(f"{key}={sources[key]}\0".encode())
    return digest.hexdigest(), per_task


def run_settings(
    model: ModelChoice,
    *,
    max_steps: int,
    max_cost_usd: float | None,
    task_timeout_s: float | None,
    prices: tuple[float, float] | None,
) -> dict[str, Any]:
    """The model and the settings an attempt ran with, as its result records them."""
    return {
        "model": model.model_dump(mode="json", exclude_none=True, exclude={"responses"}),
        "max_steps": max_steps,
        "max_cost_usd": max_cost_usd,
        "task_timeout_s": task_timeout_s,
        "price_per_mtok": None if prices is None else list(prices),
    }


def worker_environment(sandbox: SandboxSettings) -> dict[str, Any]:
    """The machine's part of a result's environment, read where the attempt ran."""
    from treadle import __version__

    return {
        "treadle": __version__,
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "executable": sys.executable,
        "os": platform.platform(),
        "host": socket.gethostname(),
        "sandbox": _isolation(sandbox),
    }


def _isolation(sandbox: SandboxSettings) -> dict[str, Any]:
    if sandbox.kind == "none":
        return {"sandbox": "none"}
    return {
        "sandbox": sandbox.kind,
        "network": sandbox.network,
        "mounts_ro": list(sandbox.mounts_ro),
        "limits": sandbox.limits.model_dump(),
        "bubblewrap": _bubblewrap_version(),
    }


@functools.cache
def _bubblewrap_version() -> str | None:
    from treadle.runtime.workspace.sandbox import BWRAP

    try:
        done = subprocess.run([BWRAP, "--version"], capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.decode("utf-8", "replace").strip() or None
