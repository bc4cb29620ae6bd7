"""The ``--store URL`` option every command that touches stored conversations takes."""

from __future__ import annotations

from typing import Annotated

import typer

from treadle.cli.output import EXIT_BAD_INPUT, fail
from treadle.store.base import EventStore, StoreError
from treadle.store.urls import open_store

StoreOption = Annotated[
    str | None,
    typer.Option(
        "--store",
        help="Store URL: sqlite:///rel.db, sqlite:////abs.db, postgresql://user@host:port/db "
        "(default: $TREADLE_STORE, else ~/.local/share/treadle/treadle.db)",
    ),
]


def open_store_or_exit(url: str | None) -> EventStore:
    """The store at ``url``; a bad URL or unreadable store exits 2 with the reason."""
    try:
        return open_store(url)
    except StoreError as error:
        fail(str(error), EXIT_BAD_INPUT)
