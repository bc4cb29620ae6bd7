"""The ``--store URL`` option every command that touches stored conversations takes."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from treadle.cli.output import EXIT_BAD_INPUT, fail

if TYPE_CHECKING:
    from treadle.store.base import EventStore

StoreOption = Annotated[
    str | None,
    typer.Option(
        "--store",
        help="Store URL: sqlite:///rel.db, sqlite:////abs.db, postgresql://user@host:port/db "
        "(default: $TREADLE_STORE, else ~/.local/share/treadle/treadle.db)",
    ),
]


def open_store_or_exit(url: str | None) -> EventStore:
    """The store at ``url``; a bad URL or unreadable store exits 2 with the reason. What a
    killed run left in TMPDIR (its terminal folder and cgroup) is removed on the way."""
    from treadle.store.base import StoreError
    from treadle.store.urls import open_store

    try:
        opened = open_store(url)
    except StoreError as error:
        fail(str(error), EXIT_BAD_INPUT)
    sweep_leftovers()
    return opened


def open_existing_store(url: str | None, *, sweep: bool = True) -> EventStore:
    """The store at ``url`` (default store if None); exits 2 when it cannot be opened. A store
    that does not exist is an error here: reading commands never create one. What a killed
    run left in TMPDIR is removed on the way (``terminal_folders.sweep``)."""
    from treadle.store.base import StoreError
    from treadle.store.urls import default_store_url, open_store

    try:
        opened = open_store(default_store_url() if url is None else url, create=False)
    except StoreError as error:
        fail(str(error), EXIT_BAD_INPUT)
    if sweep:
        sweep_leftovers()
    return opened


TERMINAL_FOLDER_PREFIX = "treadle-terminal-"
"""``treadle.runtime.tools.terminal_folders.PREFIX``, read here without loading the runtime
(tests/cli/test_startup.py checks they are the same)."""


def sweep_leftovers() -> None:
    """What killed runs left in TMPDIR removed (``terminal_folders.sweep_quietly``); the
    runtime that knows how is loaded only when such a folder is there, so that a command
    that reads the store starts at once."""
    try:
        found = any(Path(tempfile.gettempdir()).glob(TERMINAL_FOLDER_PREFIX + "*"))
    except OSError:
        found = True  # let the sweep itself say what is wrong
    if found:
        from treadle.runtime.tools.terminal_folders import sweep_quietly

        sweep_quietly()
