"""Where a store's snapshots live: beside its SQLite file, or (PostgreSQL, whose data is not
on this machine's disk) in a local data folder the caller names. Never inside a workspace,
never in the user's ``.git``, and outside what a sandboxed terminal can see."""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from treadle.store.leases import sqlite_leases_path
from treadle.store.urls import sqlite_path_and_options


def snapshot_root(store_url: str, data_dir: Path | None = None) -> Path | None:
    """The snapshot folder of the store at ``store_url``: ``<file>.snapshots`` beside a
    SQLite file; ``<data_dir>/snapshots/<digest of the URL>`` for any other store (None
    without ``data_dir``: such a store has no local folder of its own)."""
    scheme = urlsplit(store_url).scheme.split("+", 1)[0].lower()
    if scheme == "sqlite":
        path, _options = sqlite_path_and_options(store_url)
        path = path.resolve()
        return path.with_name(path.name + ".snapshots")
    if data_dir is None:
        return None
    parts = urlsplit(store_url)
    # The password is not part of which database it is (and must not name a folder).
    netloc = parts.hostname or ""
    if parts.username:
        netloc = f"{parts.username}@{netloc}"
    if parts.port:
        netloc = f"{netloc}:{parts.port}"
    identity = urlunsplit((parts.scheme, netloc, parts.path, parts.query, ""))
    digest = hashlib.sha256(identity.encode()).hexdigest()[:20]
    return Path(data_dir) / "snapshots" / digest


@functools.lru_cache(maxsize=64)
def store_files(store_url: str) -> tuple[Path, ...]:
    """The files of the store itself (SQLite's database, its run leases' file, and their
    journals): never snapshotted, never restored over, even when they lie inside a workspace.
    Resolved once per URL (every batch's snapshot asks)."""
    if urlsplit(store_url).scheme.split("+", 1)[0].lower() != "sqlite":
        return ()
    path, _options = sqlite_path_and_options(store_url)
    path = path.resolve()
    leases = sqlite_leases_path(path)
    return tuple(
        file.with_name(file.name + suffix)
        for file in (path, leases)
        for suffix in ("", "-wal", "-shm", "-journal")
    )
